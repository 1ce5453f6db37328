//! One symbolized stack frame.

use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    User,
    Kernel,
    /// A Python function (its file and line are the script's), from the kernel's Python
    /// walker: in place of the eval loop's native frame that ran it.
    Python,
    /// A JavaScript function (its file is the script's path or URL), from the kernel's V8
    /// walker: in place of the JIT or interpreter frame that ran it.
    JavaScript,
    /// A Java method (its file is the class's source file), from the kernel's HotSpot
    /// walker: in place of the interpreter or JIT frame that ran it.
    Java,
    /// A Ruby method or block (its file is the script's), from the kernel's CRuby walker: in
    /// place of the `rb_vm_exec` frame that ran it.
    Ruby,
}

impl FrameKind {
    /// A runtime's frame (named by its source file and line, in no module).
    pub fn is_runtime(self) -> bool {
        matches!(
            self,
            FrameKind::Python | FrameKind::JavaScript | FrameKind::Java | FrameKind::Ruby
        )
    }
}

/// A function (or an unknown location named by its module) in a stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub function: Arc<str>,
    /// File name of the module (`libc.so.6`, `[kernel.kallsyms]`, `[vdso]`), if known.
    pub module: Option<Arc<str>>,
    /// Full path of the module's file, when it has one (for build ids and pprof mappings).
    pub path: Option<Arc<str>>,
    /// Source file and line, when debug information has them.
    pub file: Option<Arc<str>>,
    pub line: Option<u32>,
    pub kind: FrameKind,
    /// True for a function inlined into the frame before it.
    pub inlined: bool,
    /// For an address no symbol names: its offset in the module's file (so it can be
    /// symbolized later, or looked up by hand).
    pub offset: Option<u64>,
}

impl Frame {
    /// What the report's MODULE column says: the module, or a runtime function's file name.
    pub fn module_label(&self) -> Option<Arc<str>> {
        match (self.kind, &self.file) {
            (kind, Some(file)) if kind.is_runtime() => {
                Some(Arc::from(file.rsplit('/').next().unwrap_or(file)))
            }
            _ => self.module.clone(),
        }
    }

    /// How folded stacks and flame graphs name the frame: a runtime's (Python, JavaScript)
    /// function with its file's name and line, as py-spy shows them
    /// (`find_longest_match (difflib.py:421)`); any other frame by its function.
    pub fn display_name(&self) -> std::borrow::Cow<'_, str> {
        match (self.kind, &self.file) {
            (kind, Some(file)) if kind.is_runtime() => {
                let base = file.rsplit('/').next().unwrap_or(file);
                match self.line {
                    Some(line) => format!("{} ({base}:{line})", self.function).into(),
                    None => format!("{} ({base})", self.function).into(),
                }
            }
            _ => self.function.as_ref().into(),
        }
    }

    /// A frame with only a function name (as read back from folded stacks).
    pub fn named(function: &str, kind: FrameKind) -> Self {
        Self {
            function: Arc::from(function),
            module: None,
            path: None,
            file: None,
            line: None,
            kind,
            inlined: false,
            offset: None,
        }
    }

    /// An address no symbol names, in module `name`: `[name]+0xoffset`.
    pub fn at_offset(kind: FrameKind, name: Arc<str>, path: Option<Arc<str>>, offset: u64) -> Self {
        let function = if name.starts_with('[') {
            format!("{name}+{offset:#x}")
        } else {
            format!("[{name}]+{offset:#x}")
        };
        Self {
            function: Arc::from(function),
            module: Some(name),
            path,
            file: None,
            line: None,
            kind,
            inlined: false,
            offset: Some(offset),
        }
    }

    /// A location no symbol covers: named after its module when there is one, as perf does.
    pub fn unknown(kind: FrameKind, module: Option<Arc<str>>) -> Self {
        let function = match &module {
            Some(m) if m.starts_with('[') => m.clone(),
            Some(m) => Arc::from(format!("[{m}]")),
            None => Arc::from("[unknown]"),
        };
        Self {
            function,
            module,
            path: None,
            file: None,
            line: None,
            kind,
            inlined: false,
            offset: None,
        }
    }
}
