//! Deep but bounded work (template rendering, schema validation) runs on a
//! thread with a known stack, so the limits that bound its recursion can be
//! chosen against a known size instead of the caller's (8 MiB on the main
//! thread, 2 MiB on other threads by default).

/// The stack of the thread [`on_big_stack`] starts. Only the pages a run
/// touches are backed by memory.
pub const STACK_SIZE: usize = 256 * 1024 * 1024;

/// Runs `f` on a thread with a [`STACK_SIZE`] stack; an error when no thread
/// can be started. A panic in `f` is passed on.
pub fn on_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name("kube-aws-deep".into())
            .stack_size(STACK_SIZE)
            .spawn_scoped(s, f)?;
        match h.join() {
            Ok(v) => Ok(v),
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}
