//! Sets, requests and buffers on a handle (`cpc_set_create`, `cpc_set_add_request`,
//! `cpc_walk_requests`, `cpc_buf_*`).

use super::{
    buf::Buf,
    consts::{MAX_ATTR_LEN, MAX_ATTRS, MAX_EVENT_LEN},
    error::{CpcError, Subcode},
    handle::Cpc,
    set::{Attr, Request, Set},
};

impl Cpc {
    /// `cpc_set_create`: an empty, unbound set.
    pub fn set_create(&self) -> Set {
        Set {
            handle: self.id,
            requests: Vec::new(),
            binding: None,
        }
    }

    /// `cpc_set_destroy`: unbinds (if bound) and frees the set. EINVAL for a foreign set.
    pub fn set_destroy(&self, set: Set) -> Result<(), CpcError> {
        self.check_own("cpc_set_destroy", &set)?;
        drop(set);
        Ok(())
    }

    /// `cpc_set_add_request`: returns the new request's index. Validates as libcpc does, in
    /// its order: the set (EINVAL), the event (INVALID_EVENT), each attribute's name
    /// (INVALID_ATTRIBUTE) and `picnum` (INVALID_PICNUM). Flags, the preset and attribute
    /// values are checked when the set is bound.
    pub fn set_add_request(
        &self,
        set: &mut Set,
        event: &str,
        preset: u64,
        flags: u32,
        attrs: &[Attr],
    ) -> Result<usize, CpcError> {
        const F: &str = "cpc_set_add_request";
        self.check_own(F, set)?;
        if set.binding.is_some() {
            return Err(CpcError::new(
                F,
                libc::EINVAL,
                "cannot add a request to a bound set",
            ));
        }
        if event.is_empty() || event.len() > MAX_EVENT_LEN {
            return Err(self.report(CpcError::with_subcode(
                F,
                libc::EINVAL,
                Subcode::InvalidEvent,
                format!("event name must be 1 to {MAX_EVENT_LEN} bytes"),
            )));
        }
        let resolved = self.catalog.resolve(event).map_err(|e| {
            self.report(CpcError::with_subcode(
                F,
                libc::EINVAL,
                Subcode::InvalidEvent,
                e,
            ))
        })?;
        if attrs.len() > MAX_ATTRS {
            return Err(CpcError::new(
                F,
                libc::EINVAL,
                format!("more than {MAX_ATTRS} attributes"),
            ));
        }
        let known = self.catalog.attributes();
        for a in attrs {
            if a.name.is_empty() || a.name.len() > MAX_ATTR_LEN || !known.contains(&a.name) {
                return Err(self.report(CpcError::with_subcode(
                    F,
                    libc::EINVAL,
                    Subcode::InvalidAttribute,
                    format!("'{}' (attributes here: {})", a.name, known.join(" ")),
                )));
            }
            if a.name == "picnum" && a.value >= u64::from(self.npic()) {
                return Err(self.report(CpcError::with_subcode(
                    F,
                    libc::EINVAL,
                    Subcode::InvalidPicnum,
                    format!("picnum {} (counters: 0 to {})", a.value, self.npic() - 1),
                )));
            }
        }
        set.requests.push(Request {
            event: event.to_string(),
            preset,
            flags,
            attrs: attrs.to_vec(),
            resolved,
        });
        Ok(set.requests.len() - 1)
    }

    /// `cpc_walk_requests`: calls `f(index, event, preset, flags, attrs)` for each request,
    /// newest first, as libcpc does.
    pub fn walk_requests(&self, set: &Set, mut f: impl FnMut(usize, &str, u64, u32, &[Attr])) {
        for (i, r) in set.requests.iter().enumerate().rev() {
            f(i, &r.event, r.preset, r.flags, &r.attrs);
        }
    }

    /// `cpc_buf_create`: a zeroed buffer sized for the set's requests *now*. EINVAL for a
    /// foreign set.
    pub fn buf_create(&self, set: &Set) -> Result<Buf, CpcError> {
        self.check_own("cpc_buf_create", set)?;
        Ok(Buf::new(self.id, set.requests.len()))
    }

    /// `cpc_buf_destroy`: EINVAL for a buffer of another handle.
    pub fn buf_destroy(&self, buf: Buf) -> Result<(), CpcError> {
        if buf.handle != self.id {
            return Err(CpcError::new(
                "cpc_buf_destroy",
                libc::EINVAL,
                "buffer does not belong to this handle",
            ));
        }
        Ok(())
    }

    /// `cpc_buf_get`: EINVAL for an index out of range (illumos does not check; we do).
    pub fn buf_get(&self, buf: &Buf, index: usize) -> Result<u64, CpcError> {
        buf.get(index)
            .ok_or_else(|| index_error("cpc_buf_get", index, buf.len()))
    }

    /// `cpc_buf_set`: writes one slot; never touches counters or presets.
    pub fn buf_set(&self, buf: &mut Buf, index: usize, value: u64) -> Result<(), CpcError> {
        let len = buf.len();
        if buf.set(index, value) {
            Ok(())
        } else {
            Err(index_error("cpc_buf_set", index, len))
        }
    }

    /// `cpc_buf_hrtime`.
    pub fn buf_hrtime(&self, buf: &Buf) -> u64 {
        buf.hrtime()
    }

    /// `cpc_buf_tick`.
    pub fn buf_tick(&self, buf: &Buf) -> u64 {
        buf.tick()
    }

    /// `cpc_buf_sub`: `ds = a - b`; silently nothing if the sizes differ.
    pub fn buf_sub(&self, ds: &mut Buf, a: &Buf, b: &Buf) {
        Buf::sub(ds, a, b)
    }

    /// `cpc_buf_add`: `ds = a + b`; silently nothing if the sizes differ.
    pub fn buf_add(&self, ds: &mut Buf, a: &Buf, b: &Buf) {
        Buf::add(ds, a, b)
    }

    /// `cpc_buf_copy`: `ds = src`; silently nothing if the sizes differ.
    pub fn buf_copy(&self, ds: &mut Buf, src: &Buf) {
        Buf::copy(ds, src)
    }

    /// `cpc_buf_zero`.
    pub fn buf_zero(&self, buf: &mut Buf) {
        buf.zero()
    }
}

impl Cpc {
    /// EINVAL unless `set` was created by this handle.
    pub(crate) fn check_own(&self, func: &'static str, set: &Set) -> Result<(), CpcError> {
        if set.handle == self.id {
            Ok(())
        } else {
            Err(CpcError::new(
                func,
                libc::EINVAL,
                "set does not belong to this handle",
            ))
        }
    }
}

fn index_error(func: &'static str, index: usize, len: usize) -> CpcError {
    CpcError::new(
        func,
        libc::EINVAL,
        format!("index {index} out of range (buffer has {len})"),
    )
}
