//! What a loaded program is attached to: bpf links to perf events (with their cookies) and the
//! events the sampler keeps alive, all made through the [`Kernel`] seam.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::BpfError;
use crate::{
    kernel::{Ioctl, Kernel},
    perf::PerfEvent,
};

/// Links and events of one program. The links are declared first: they detach before the
/// events they join close.
#[derive(Debug)]
pub(crate) struct Attachments {
    kernel: &'static dyn Kernel,
    links: Vec<OwnedFd>,
    events: Vec<PerfEvent>,
    /// The kernel has perf links with attach cookies (5.15); else PERF_EVENT_IOC_SET_BPF.
    cookies: bool,
}

impl Attachments {
    pub fn new(kernel: &'static dyn Kernel) -> Self {
        Self {
            kernel,
            links: Vec::new(),
            events: Vec::new(),
            cookies: super::KernelFeatures::get().attach_cookies(),
        }
    }

    /// Runs `prog` at every overflow of `event` (cookie `cookie`); the link is kept here and
    /// holds the event open.
    pub fn link(
        &mut self,
        prog: BorrowedFd<'_>,
        event: BorrowedFd<'_>,
        cookie: u64,
    ) -> Result<(), BpfError> {
        if !self.cookies {
            // Before 5.15: no perf links and no cookies. The program takes every overflow
            // for request 0 (`DEFAULT_COOKIE`); the event's fd holds the attachment.
            if cookie != 0 {
                return Err(BpfError::NoAttachCookies {
                    what: concat!(
                        "telling events apart (record with several events, libcpc overflow ",
                        "notification of a request other than the first)"
                    ),
                    release: super::features::kernel_release(),
                });
            }
            return self.set_bpf(prog, event);
        }
        let link = self
            .kernel
            .bpf_link_perf_event(prog, event, cookie)
            .map_err(BpfError::Link)?;
        self.links.push(link);
        Ok(())
    }

    /// Attaches `prog` to `event` with PERF_EVENT_IOC_SET_BPF (kernels before 5.15 have no
    /// perf links): the event's fd holds the attachment, there is no cookie.
    pub fn set_bpf(&mut self, prog: BorrowedFd<'_>, event: BorrowedFd<'_>) -> Result<(), BpfError> {
        use std::os::fd::AsRawFd as _;
        self.kernel
            .perf_ioctl(event, Ioctl::SetBpf(prog.as_raw_fd() as u32))
            .map_err(BpfError::SetBpf)
    }

    /// Links `prog` to `event` and keeps the event; on failure the event is closed.
    pub fn attach(
        &mut self,
        prog: BorrowedFd<'_>,
        event: PerfEvent,
        cookie: u64,
    ) -> Result<(), BpfError> {
        self.link(prog, event.as_fd(), cookie)?;
        self.events.push(event);
        Ok(())
    }

    /// Keeps `event` open (and in [`Attachments::events`]) without a program attached.
    pub fn keep(&mut self, event: PerfEvent) {
        self.events.push(event);
    }

    /// Stores `event` at `index` of the PERF_EVENT_ARRAY `map`.
    pub fn set_array(
        &self,
        map: BorrowedFd<'_>,
        index: u32,
        event: BorrowedFd<'_>,
    ) -> Result<(), BpfError> {
        self.kernel
            .bpf_perf_event_array_set(map, index, event)
            .map_err(BpfError::Sibling)
    }

    pub fn events(&self) -> &[PerfEvent] {
        &self.events
    }

    /// Detaches everything: links first, then the events close.
    pub fn clear(&mut self) {
        self.links.clear();
        self.events.clear();
    }

    #[cfg(test)]
    pub fn links(&self) -> usize {
        self.links.len()
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;
    use crate::{
        kernel::fake::{Call, Fake},
        perf::{EventAttr, Scope, SoftwareEvent},
    };

    fn event(fake: &'static Fake) -> PerfEvent {
        let attr = EventAttr::software(SoftwareEvent::CpuClock);
        PerfEvent::open_in(fake, &attr, Scope::Cpu(0), None, || "cpu-clock".into()).unwrap()
    }

    /// A stand-in program fd (the fake never looks behind it).
    fn program() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn links_carry_the_program_event_and_cookie_and_keep_the_event() {
        let fake = Fake::leak();
        let prog = program();
        let mut a = Attachments::new(fake);
        let (e0, e1) = (event(fake), event(fake));
        let (f0, f1) = (e0.as_fd().as_raw_fd(), e1.as_fd().as_raw_fd());
        a.attach(prog.as_fd(), e0, 0).unwrap();
        a.attach(prog.as_fd(), e1, (3 << 16) | 7).unwrap();
        let p = prog.as_raw_fd();
        let links: Vec<Call> = fake
            .calls()
            .into_iter()
            .filter(|c| matches!(c, Call::Link { .. }))
            .collect();
        assert_eq!(
            links,
            vec![
                Call::Link {
                    prog: p,
                    event: f0,
                    cookie: 0
                },
                Call::Link {
                    prog: p,
                    event: f1,
                    cookie: (3 << 16) | 7
                },
            ]
        );
        assert_eq!((a.links(), a.events().len()), (2, 2));

        let map = program();
        a.set_array(map.as_fd(), 1, a.events()[1].as_fd()).unwrap();
        assert_eq!(
            fake.calls().last(),
            Some(&Call::ArraySet {
                map: map.as_raw_fd(),
                index: 1,
                event: f1
            })
        );
        a.clear();
        assert_eq!((a.links(), a.events().len()), (0, 0));
    }

    #[test]
    fn a_refused_link_names_the_call_and_errno_and_keeps_nothing() {
        let fake = Fake::leak();
        fake.fail_link(libc::EPERM);
        let prog = program();
        let mut a = Attachments::new(fake);
        let err = a.attach(prog.as_fd(), event(fake), 1).unwrap_err();
        match &err {
            BpfError::Link(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM)),
            other => panic!("not a link error: {other:?}"),
        }
        assert!(err.to_string().contains("BPF_LINK_CREATE"), "{err}");
        assert_eq!((a.links(), a.events().len()), (0, 0));
    }
}
