//! `record`'s runtime switches, made from the registry so that a runtime costs no line
//! here: `--no-runtime NAME` (repeatable) and each runtime's own `--no-NAME`.

use clap::{
    Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches, builder::PossibleValuesParser,
};

use crate::runtimes::registry::RUNTIMES;

const NO_RUNTIME: &str = "no-runtime";

/// The runtimes whose frames are not shown, by name, in registry order.
#[derive(Debug, Default)]
pub struct RuntimeFlags {
    pub off: Vec<String>,
}

impl FromArgMatches for RuntimeFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = Self::default();
        flags.update_from_arg_matches(m)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        let named: Vec<&String> = m
            .get_many::<String>(NO_RUNTIME)
            .into_iter()
            .flatten()
            .collect();
        self.off = RUNTIMES
            .iter()
            .filter(|s| m.get_flag(s.off_flag) || named.iter().any(|n| *n == s.name))
            .map(|s| s.name.to_string())
            .collect();
        Ok(())
    }
}

impl Args for RuntimeFlags {
    fn augment_args(cmd: Command) -> Command {
        let cmd = RUNTIMES.iter().fold(cmd, |cmd, s| {
            cmd.arg(
                Arg::new(s.off_flag)
                    .long(s.off_flag)
                    .action(ArgAction::SetTrue)
                    .help(s.off_help),
            )
        });
        cmd.arg(
            Arg::new(NO_RUNTIME)
                .long(NO_RUNTIME)
                .value_name("NAME")
                .action(ArgAction::Append)
                .value_parser(PossibleValuesParser::new(RUNTIMES.iter().map(|s| s.name)))
                .help("Show no frames of runtime NAME, as its own --no-NAME does (repeatable)"),
        )
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        runtimes: RuntimeFlags,
    }

    fn off(args: &[&str]) -> Vec<String> {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .unwrap()
            .runtimes
            .off
    }

    #[test]
    fn both_spellings_say_the_same() {
        assert!(off(&[]).is_empty());
        assert_eq!(off(&["--no-python"]), ["python"]);
        assert_eq!(off(&["--no-runtime", "python"]), ["python"]);
        assert_eq!(
            off(&["--no-java", "--no-runtime", "js", "--no-runtime=java"]),
            ["js", "java"]
        );
        assert_eq!(off(&["--no-ruby"]), ["ruby"]);
        assert!(Cli::try_parse_from(["x", "--no-runtime", "perl"]).is_err());
    }
}
