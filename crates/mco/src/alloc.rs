//! The process allocator.
//!
//! `mco up` runs the API server, the controller and every simulated node's daemon in one process,
//! and glibc's malloc/free was about 40 % of its CPU in a 1,000-node rollout. mimalloc halves the
//! rollout's wall time (measured in commit 2ef3900, which adopted it).
//!
//! mimalloc reserves its arenas in 1 GiB mappings and, where the kernel allows, asks for
//! transparent huge pages on them. A few live objects then pin whole 2 MiB pages, and the same
//! rollout peaked at 2.3 GiB RSS instead of 0.7 GiB. So the process opts out of huge pages before
//! it allocates in earnest; this also covers hosts whose THP setting is `always`.

/// `--features system-alloc` keeps glibc's allocator, which heap profilers such as heaptrack
/// follow; mimalloc's allocations are invisible to them.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Opts the process out of transparent huge pages. Best effort: an old kernel without the
/// prctl only costs memory, never correctness.
#[allow(unsafe_code)]
pub fn disable_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integer arguments and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    #[allow(unsafe_code)]
    fn huge_pages_are_off_for_the_process() {
        super::disable_huge_pages();
        // SAFETY: PR_GET_THP_DISABLE takes no pointers; it returns the flag.
        let flag = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(flag, 1);
    }
}
