//! "Did you mean …?" for unknown event and attribute names.

/// At most this many suggestions are offered: more is noise.
const MAX_SUGGESTIONS: usize = 3;

/// Candidates close to `name`: case-insensitive exact matches first (`papi_tot_cyc` →
/// `PAPI_tot_cyc`), then those within a small edit distance, nearest first, ties by name.
///
/// The distance allowed grows with the name (a third of its length, between 1 and 3), so a
/// short typo like `cs` is not "near" every other two-letter word.
pub(crate) fn suggest<'a, I>(name: &str, candidates: I) -> Vec<String>
where
    I: IntoIterator<Item = &'a str>,
{
    let wanted = name.to_lowercase();
    let limit = (name.chars().count() / 3).clamp(1, 3);
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .filter(|c| *c != name)
        .filter_map(|c| {
            let lower = c.to_lowercase();
            // Case-insensitive equality ranks ahead of any real edit.
            let score = if lower == wanted {
                0
            } else {
                damerau_levenshtein(&wanted, &lower) + 1
            };
            (score <= limit + 1).then_some((score, c))
        })
        .collect();
    scored.sort_unstable();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, c)| c.to_owned())
        .collect()
}

/// Edit distance counting insertions, deletions, substitutions and transpositions of
/// adjacent characters (the "optimal string alignment" variant), over chars.
pub(crate) fn damerau_levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    // Three rolling rows: two back (for transpositions), previous and current.
    let mut before: Vec<usize> = vec![0; width];
    let mut prev: Vec<usize> = (0..width).collect();
    let mut cur: Vec<usize> = vec![0; width];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            cur[j] = d;
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// `" (did you mean a, b or c?)"`, or nothing when there is nothing to suggest.
pub(crate) fn did_you_mean(suggestions: &[String]) -> String {
    match suggestions {
        [] => String::new(),
        [one] => format!(" (did you mean {one}?)"),
        [rest @ .., last] => format!(" (did you mean {} or {last}?)", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(damerau_levenshtein("", ""), 0);
        assert_eq!(damerau_levenshtein("abc", ""), 3);
        assert_eq!(damerau_levenshtein("cyles", "cycles"), 1);
        assert_eq!(
            damerau_levenshtein("cylces", "cycles"),
            1,
            "one transposition"
        );
        assert_eq!(damerau_levenshtein("kitten", "sitting"), 3);
    }

    #[test]
    fn case_insensitive_match_comes_first() {
        let got = suggest("papi_tot_cyc", ["PAPI_tot_ins", "PAPI_tot_cyc", "cycles"]);
        assert_eq!(got, ["PAPI_tot_cyc", "PAPI_tot_ins"]);
    }

    #[test]
    fn short_names_need_close_matches() {
        // "cs" may be one edit from "cx" but not two from "dummy"-like words.
        assert_eq!(suggest("cx", ["cs", "bus", "dummy"]), ["cs"]);
        assert!(suggest("zzzz", ["cycles", "dummy"]).is_empty());
    }

    #[test]
    fn at_most_three_nearest_first() {
        let got = suggest("abcd", ["abce", "abcf", "abxx", "abcg", "abcd"]);
        assert_eq!(got, ["abce", "abcf", "abcg"], "exact name itself excluded");
    }

    #[test]
    fn message_forms() {
        assert_eq!(did_you_mean(&[]), "");
        assert_eq!(did_you_mean(&["a".into()]), " (did you mean a?)");
        let three = ["a".into(), "b".into(), "c".into()];
        assert_eq!(did_you_mean(&three), " (did you mean a, b or c?)");
    }
}
