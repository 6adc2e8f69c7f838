//! Deep but bounded work (template rendering, schema validation) runs on a
//! thread with a known stack, so the limits that bound its recursion can be
//! chosen against a known size instead of the caller's (8 MiB on the main
//! thread, 2 MiB on other threads by default).

/// The stack of the thread [`on_big_stack`] starts. Only the pages a run
/// touches are backed by memory.
pub const STACK_SIZE: usize = 256 * 1024 * 1024;

std::thread_local! {
    /// Whether this thread is one [`on_big_stack`] started.
    static DEEP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` on a thread with a [`STACK_SIZE`] stack; an error when no thread
/// can be started. A panic in `f` is passed on. On such a thread already
/// (the CLI runs every command on one: src/main.rs) `f` runs in place, so a
/// render starts one thread, not one per template and values file (it was
/// 44 for the example). The work before it is shallow: the template guard
/// keeps 32 MiB of the stack in reserve (src/plugin/guard.rs).
pub fn on_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    if DEEP.with(std::cell::Cell::get) {
        return Ok(f());
    }
    std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name("kube-aws-deep".into())
            .stack_size(STACK_SIZE)
            .spawn_scoped(s, || {
                DEEP.with(|d| d.set(true));
                f()
            })?;
        match h.join() {
            Ok(v) => Ok(v),
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_work_runs_on_the_first_big_stack_thread() {
        let outer = std::thread::current().id();
        let (first, nested) = on_big_stack(|| {
            let first = std::thread::current().id();
            let nested = on_big_stack(|| std::thread::current().id()).unwrap();
            (first, nested)
        })
        .unwrap();
        assert_ne!(first, outer, "the first call starts a thread");
        assert_eq!(nested, first, "a nested call runs in place");
        // Back on the caller's thread: a new call starts a thread again.
        assert_ne!(on_big_stack(|| std::thread::current().id()).unwrap(), outer);
    }

    #[test]
    fn a_panic_is_passed_on() {
        let r = std::panic::catch_unwind(|| on_big_stack(|| panic!("deep")).unwrap());
        assert!(r.is_err());
    }
}
