//! Detection on synthetic facts and fake memory, on the installed Debian libruby 3.1.2 when
//! there is one, and (briefly) on a live `ruby3.1` whose main thread is walked from user
//! space and named: the offsets, the EC and the symbol table checked against the real VM.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use profiler_common::ruby::{
    EC_MAIN_RACTOR, EC_TLS_DTV, ENV_FLAG_LOCAL, EP_ME_CREF, EP_SPECVAL, FRAME_CFUNC, FRAME_ISEQ,
    FRAME_MAGIC_CFUNC, FRAME_MAGIC_DUMMY, FRAME_MAGIC_MASK, IMEMO_MASK, IMEMO_MENT, IMEMO_SHIFT,
    IMEMO_SVAR, NONE, ruby_frame,
};

use super::*;
use crate::runtimes::{
    ruby::naming::Names,
    shared::memory::{FakeMemory, ProcessMemory},
};

const LIBRUBY: &str = "/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1.2";
const RUBY: &str = "/usr/bin/ruby3.1";

fn mapping(name: &str) -> Mapping {
    Mapping {
        start: 0x7f00_0000_0000,
        end: 0x7f00_0010_0000,
        offset: 0,
        dev: 1,
        ino: 2,
        name: Arc::from(name),
    }
}

fn facts() -> FileFacts {
    FileFacts {
        version: Version::new(3, 1, 2),
        vm_exec: 0x1000..0x2000,
        tls: Some(TlsAccess::Dtv {
            module_slot: 0x3000,
            offset: 8,
        }),
        main_ractor: Some(0x4000),
        global_ec: None,
        symbols: Some(0x5000),
    }
}

#[test]
fn the_library_is_picked_before_the_executable() {
    let maps = [mapping("/usr/bin/ruby3.1"), mapping(LIBRUBY)];
    let (m, exe) = pick_mapping(&maps, Some("/usr/bin/ruby3.1")).unwrap();
    assert_eq!((&*m.name, exe), (LIBRUBY, false));
    let (m, exe) = pick_mapping(&maps[..1], Some("/usr/bin/ruby3.1")).unwrap();
    assert_eq!((&*m.name, exe), ("/usr/bin/ruby3.1", true));
    assert!(
        pick_mapping(
            &[mapping("/usr/bin/python3.11")],
            Some("/usr/bin/python3.11")
        )
        .is_none()
    );
    assert!(!is_candidate(&[mapping("/usr/lib/libc.so.6")], None));
}

#[test]
fn the_tls_module_id_is_read_from_the_got_and_zero_is_waiting() {
    let bias = 0x7f00_0000_0000;
    let mut mem = FakeMemory::default();
    mem.put(bias + 0x3000, &0u64.to_le_bytes());
    let d = resolve(1, "libruby".into(), &facts(), bias, &mem);
    assert!(matches!(d, Detection::Waiting { .. }), "{d:?}");

    mem.put(bias + 0x3000, &2u64.to_le_bytes());
    let Detection::Found(r) = resolve(1, "libruby".into(), &facts(), bias, &mem) else {
        panic!("not found");
    };
    assert_eq!(
        r.ec,
        Ec::TlsDtv {
            module: 2,
            offset: 8
        }
    );
    assert_eq!(r.vm_exec, bias + 0x1000..bias + 0x2000);
    assert_eq!(r.symbols, Some(bias + 0x5000));
    let p = r.proc(2400);
    assert_eq!(
        (p.ec_source, p.tls_module, p.tls_offset),
        (EC_TLS_DTV, 2, 8)
    );
    assert_eq!((p.task_fsbase, p.dtv_offset, p.dtv_entry), (2400, 8, 16));
    assert_eq!((p.ec_cfp, p.cfp_size, p.ec_thread_ptr), (16, 64, 48));
    assert_eq!((p.thread_nt, p.native_tid), (NONE, NONE));
    assert_eq!(p.version, 0x030102);
}

#[test]
fn without_tls_the_main_ractor_else_the_global_else_one_line() {
    let bias = 0x1000_0000;
    let mem = FakeMemory::default();
    let f = FileFacts {
        tls: None,
        ..facts()
    };
    let Detection::Found(r) = resolve(1, "l".into(), &f, bias, &mem) else {
        panic!()
    };
    assert_eq!(
        r.ec,
        Ec::MainRactor {
            addr: bias + 0x4000
        }
    );
    assert_eq!(r.proc(0).ec_source, EC_MAIN_RACTOR);
    assert_eq!(r.proc(0).ractor_running_ec, 520);

    let f = FileFacts {
        version: Version::new(2, 7, 8),
        tls: None,
        main_ractor: None,
        global_ec: Some(0x6000),
        ..facts()
    };
    let Detection::Found(r) = resolve(1, "l".into(), &f, bias, &mem) else {
        panic!()
    };
    assert_eq!(
        r.ec,
        Ec::Global {
            addr: bias + 0x6000
        }
    );

    let f = FileFacts {
        tls: None,
        main_ractor: None,
        ..facts()
    };
    let Detection::Unsupported { why, .. } = resolve(1, "l".into(), &f, bias, &mem) else {
        panic!()
    };
    assert!(why.contains("EC cannot be found"), "{why}");

    let f = FileFacts {
        version: Version::new(3, 5, 0),
        ..facts()
    };
    let Detection::Unsupported { why, .. } = resolve(1, "l".into(), &f, bias, &mem) else {
        panic!()
    };
    assert!(why.contains("3.5.0"), "{why}");
}

/// The installed library's own facts, as `nm -D` and `readelf -r` show them.
#[test]
fn debian_libruby_3_1_2() {
    if !Path::new(LIBRUBY).exists() {
        eprintln!("skipped: {LIBRUBY} is not installed");
        return;
    }
    let data = std::fs::read(LIBRUBY).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let f = inspect(&obj, &*data, false).unwrap();
    assert_eq!(f.version, Version::new(3, 1, 2));
    assert_eq!(f.vm_exec, 0x253060..0x253060 + 2922);
    assert_eq!(
        f.tls,
        Some(TlsAccess::Dtv {
            module_slot: 0x3aea48,
            offset: 8
        })
    );
    assert_eq!(f.main_ractor, Some(0x3bd368));
    assert_eq!(f.global_ec, None);
    // Not exported: read off rb_id2str's code.
    assert_eq!(f.symbols, Some(0x3af1c0));
    let fc = symbol_table::from_id2str(
        |a, l| {
            obj.sections()
                .find_map(|s| s.data_range(a, l).ok().flatten())
                .map(<[u8]>::to_vec)
        },
        0x208e80,
    )
    .unwrap();
    assert_eq!(
        fc.last_op_id,
        Some(for_version(f.version).unwrap().last_op_id)
    );
}

/// A `ruby3.1` child, killed when dropped.
struct Child31(Child);

impl Drop for Child31 {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `rb_vm_frame_method_entry`: the method entry of the frame whose ep is `ep`.
fn method_entry(mem: &dyn Memory, mut ep: u64) -> u64 {
    let is_imemo = |v: u64, t: u64| -> bool {
        v & 7 == 0
            && v > 0xff
            && mem
                .read_u64(v)
                .is_ok_and(|f| f & 0x1f == 0x1a && (f >> IMEMO_SHIFT) & IMEMO_MASK == t)
    };
    for _ in 0..8 {
        let me = mem.read_u64(ep - 8 * EP_ME_CREF).unwrap_or(0);
        if is_imemo(me, IMEMO_MENT) {
            return me;
        }
        if is_imemo(me, IMEMO_SVAR) {
            let inner = mem.read_u64(me + 8).unwrap_or(0);
            if is_imemo(inner, IMEMO_MENT) {
                return inner;
            }
        }
        let flags = mem.read_u64(ep).unwrap_or(ENV_FLAG_LOCAL);
        if flags & ENV_FLAG_LOCAL != 0 {
            return 0;
        }
        ep = mem.read_u64(ep - 8 * EP_SPECVAL).unwrap_or(0) & !3;
    }
    0
}

/// The main ractor's running EC (the kernel's fallback; the GVL holder's).
fn main_ractor_ec(r: &Ruby, mem: &dyn Memory) -> Option<u64> {
    let ractor = mem.read_u64(r.main_ractor?).ok()?;
    mem.read_u64(ractor + u64::from(r.layout.ractor_running_ec))
        .ok()
}

/// The EC as the kernel reads `ruby_current_ec` through the DTV from the thread pointer.
fn dtv_ec(r: &Ruby, mem: &dyn Memory, tp: u64) -> Option<u64> {
    let Ec::TlsDtv { module, offset } = r.ec else {
        return None;
    };
    let p = r.proc(0);
    let dtv = mem.read_u64(tp + u64::from(p.dtv_offset)).ok()?;
    let block = mem.read_u64(dtv + module * u64::from(p.dtv_entry)).ok()?;
    mem.read_u64(block.wrapping_add_signed(offset)).ok()
}

/// The thread pointer (`fs_base`) of process `pid`'s main thread, read by attaching to it
/// for a moment; `None` where ptrace is not allowed.
fn thread_pointer(pid: u32) -> Option<u64> {
    let pid = pid as libc::pid_t;
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: PTRACE_ATTACH to our own child; the address and data arguments are unused.
    if unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, null, null) } != 0 {
        return None;
    }
    let mut status = 0;
    // SAFETY: `status` is a live c_int the call writes.
    unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
    // SAFETY: `user_regs_struct` is plain integers: all zeroes is a valid value.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    let regs_ptr = (&mut regs as *mut libc::user_regs_struct).cast::<libc::c_void>();
    // SAFETY: PTRACE_GETREGS writes one `user_regs_struct` at `regs_ptr`, which is one.
    let got = unsafe { libc::ptrace(libc::PTRACE_GETREGS, pid, null, regs_ptr) } == 0;
    // SAFETY: detaches the tracee attached above (it runs on).
    unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, null, null) };
    got.then_some(regs.fs_base)
}

/// The main thread's frames from `ec`, walked as the kernel walker will and named,
/// innermost first.
fn walk(r: &Ruby, mem: &dyn Memory, names: &mut Names, ec: u64) -> Vec<(String, Option<u32>)> {
    let l = &r.layout;
    let read = |a: u64| mem.read_u64(a).unwrap_or(0);
    let stack = read(ec + u64::from(l.ec_vm_stack));
    let size = read(ec + u64::from(l.ec_vm_stack_size));
    // `backtrace_each`: up to and including the second frame from the stack's end (the
    // last one is th_init's dummy).
    let last = stack + 8 * size - 2 * u64::from(l.cfp_size);
    let mut cfp = read(ec + u64::from(l.ec_cfp));
    let mut out = Vec::new();
    while cfp != 0 && cfp <= last && out.len() < 64 {
        let (pc, iseq, ep) = (
            read(cfp + u64::from(l.cfp_pc)),
            read(cfp + u64::from(l.cfp_iseq)),
            read(cfp + u64::from(l.cfp_ep)),
        );
        cfp += u64::from(l.cfp_size);
        let magic = read(ep) & FRAME_MAGIC_MASK;
        let words = if magic == FRAME_MAGIC_CFUNC {
            let cme = method_entry(mem, ep);
            ruby_frame(FRAME_CFUNC, cme, cme, 0)
        } else if magic == FRAME_MAGIC_DUMMY || iseq == 0 || pc == 0 {
            continue;
        } else {
            ruby_frame(FRAME_ISEQ, iseq, method_entry(mem, ep), pc)
        };
        match names.frame(mem, &words) {
            Ok(f) => out.push((f.label.to_string(), f.line)),
            Err(e) => out.push((format!("error: {e}"), None)),
        }
    }
    out
}

/// A live 3.1.2: detection reads the TLS module id the dynamic linker wrote; the main
/// ractor's running EC (the kernel's fallback) walks to frames named with the symbol table
/// found in rb_id2str's code (C methods, `__classpath__`), lines from the succinct table; a
/// module's method through its iclass, a singleton's through `__attached__`.
#[test]
fn live_ruby_3_1_2_frames_are_named() {
    if !Path::new(RUBY).exists() || !Path::new(LIBRUBY).exists() {
        eprintln!("skipped: {RUBY} is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("ruby-naming-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("live.rb");
    std::fs::write(
        &script,
        "module M\n  def m\n    [1].each do |x|\n      sleep 100\n    end\n  end\nend\n\
         class Foo\n  include M\n  def self.baz\n    new.bar\n  end\n  def bar\n    m\n  end\n\
         end\nFoo.baz\n",
    )
    .unwrap();
    let child = Child31(
        Command::new(RUBY)
            .arg(&script)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let mem = ProcessMemory::new(pid);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = Vec::new();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let Ok(Detection::Found(r)) = detect(pid) else {
            continue;
        };
        let Ec::TlsDtv { module, offset } = r.ec else {
            panic!("EC {:?}", r.ec);
        };
        assert!(module > 0 && offset == 8);
        let Some(ec) = main_ractor_ec(&r, &mem) else {
            continue;
        };
        let mut names = Names::new(r.layout, r.symbols);
        last = walk(&r, &mem, &mut names, ec);
        if last.first().is_some_and(|(l, _)| l.ends_with("sleep")) {
            // The TLS route the kernel takes reaches the same EC (one thread).
            match thread_pointer(pid) {
                Some(tp) => {
                    assert_eq!(dtv_ec(&r, &mem, tp), Some(ec));
                    eprintln!("DTV route: tp {tp:#x}, {:?}, EC {ec:#x}", r.ec);
                }
                None => eprintln!("ptrace not allowed: the DTV route is not checked"),
            }
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let want: Vec<(String, Option<u32>)> = [
        ("Kernel#sleep", None),
        ("block in M#m", Some(4)),
        ("Array#each", None),
        ("M#m", Some(3)),
        ("Foo#bar", Some(14)),
        ("Foo.baz", Some(11)),
        ("<main>", Some(17)),
    ]
    .into_iter()
    .map(|(l, n)| (l.to_string(), n))
    .collect();
    assert_eq!(last, want);
}
