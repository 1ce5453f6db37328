//! blazesym's symbols as [`Frame`]s.

use std::sync::Arc;

use blazesym::symbolize::{CodeInfo, Sym};

use super::{Frame, FrameKind};

fn location(info: Option<&CodeInfo<'_>>) -> (Option<Arc<str>>, Option<u32>) {
    match info {
        Some(ci) => (
            Some(Arc::from(ci.to_path().to_string_lossy().as_ref())),
            ci.line,
        ),
        None => (None, None),
    }
}

/// The frames of one address: the function, then each function inlined into it, in call order.
pub(super) fn from_sym(
    sym: &Sym<'_>,
    kind: FrameKind,
    module: &Arc<str>,
    path: Option<&Arc<str>>,
) -> Arc<[Frame]> {
    let module = Some(module.clone());
    let path = path.cloned();
    let (file, line) = location(sym.code_info.as_deref());
    let mut frames = vec![Frame {
        function: Arc::from(sym.name.as_ref()),
        module: module.clone(),
        path: path.clone(),
        file,
        line,
        kind,
        inlined: false,
        offset: None,
    }];
    for inl in sym.inlined.iter() {
        let (file, line) = location(inl.code_info.as_ref());
        frames.push(Frame {
            function: Arc::from(inl.name.as_ref()),
            module: module.clone(),
            path: path.clone(),
            file,
            line,
            kind,
            inlined: true,
            offset: None,
        });
    }
    frames.into()
}
