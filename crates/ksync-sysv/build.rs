//! Compiles `src/semctl_shim.c`, the one piece of the library that must be C:
//! glibc's `semctl` is variadic, and stable Rust cannot define a C-variadic
//! function.

fn main() {
    println!("cargo:rerun-if-changed=src/semctl_shim.c");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    // The library exists for Linux on x86-64 and AArch64 only (see lib.rs).
    if os == "linux" && (arch == "x86_64" || arch == "aarch64") {
        cc::Build::new()
            .file("src/semctl_shim.c")
            .warnings(true)
            .extra_warnings(true)
            // A thread whose asynchronous cancel the library held off is
            // cancelled as `semctl` returns, by a forced unwind that passes
            // through the shim's frame: it needs unwind tables (x86-64's
            // default, not every target's).
            .flag_if_supported("-funwind-tables")
            .compile("ksync_sysv_semctl_shim");
    }
}
