//! The default way posts share their wake-ups out follows the CPUs the
//! process started with, whichever thread asks first. A test binary of its
//! own: the default is decided once per process, by the first to ask.

#[cfg(target_os = "linux")]
#[test]
fn a_thread_bound_to_one_cpu_does_not_decide_the_default_for_the_process() {
    use ksync::futex_batch::{sharing_mode, SharingMode};

    if std::env::var_os("KSYNC_WAKE_SHARING").is_some() {
        eprintln!("skipped: KSYNC_WAKE_SHARING decides the mode here");
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let expected = match cpus {
        n if n >= 4 => SharingMode::Any,
        2.. => SharingMode::Local,
        // One CPU: off either way, so this run cannot tell.
        _ => SharingMode::Off,
    };
    std::thread::spawn(move || {
        bind_to_one_cpu();
        assert_eq!(
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            1
        );
        assert_eq!(
            sharing_mode(),
            expected,
            "the process started on {cpus} CPUs; the first thread to ask runs on one"
        );
    })
    .join()
    .unwrap();
}

/// Binds the calling thread to the first CPU it may run on.
#[cfg(target_os = "linux")]
fn bind_to_one_cpu() {
    // SAFETY: a zeroed cpu_set_t is an empty set; the calls read and write
    // only the set, whose size they are given.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        let size = core::mem::size_of::<libc::cpu_set_t>();
        assert_eq!(libc::sched_getaffinity(0, size, &mut set), 0);
        let first = (0..libc::CPU_SETSIZE as usize)
            .find(|&cpu| libc::CPU_ISSET(cpu, &set))
            .expect("a thread runs on some CPU");
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(first, &mut set);
        assert_eq!(libc::sched_setaffinity(0, size, &set), 0);
    }
}
