//! Each release's wait-condition timeout: how long CloudFormation waits for
//! the release's signal before it fails the stack (and rolls it back).
//!
//! A wait condition's clock starts when CloudFormation creates it: once the
//! controller group is complete (at create) or the plan pointer is updated
//! (at update). From there the reconciler must start (its timer's tick, the
//! bundle, `/readyz`, the helm client: [`RECONCILER_START_SECONDS`]), install
//! every release on the longest chain that leads to this one, pass the
//! Ready-node gate if this release is not a bootstrap one (with the rollouts
//! of the plugin manifests' workloads that must be Ready before such
//! releases, src/render/plan.rs `manifestRollouts`), and install this
//! release. So a release's timeout is that start allowance, plus the gate,
//! plus its **critical path**: the longest chain of per-release budgets
//! through `dependsOn` and the bootstrap ordering (every bootstrap release
//! before any other) that ends at it. Releases that are not on its chain do
//! not add to it, unlike the running sum this replaces, which gave the
//! example's last release 3h54m (now 2h6m, and 59m for the bootstrap ones).
//!
//! One more term keeps the timeout an upper bound: the reconciler installs
//! at most `concurrency` releases at once (src/node/kube_aws_node/schedule.py,
//! a greedy list scheduler). When more than `concurrency` releases could run
//! before this one is done, a ready release can wait for a slot. Graham's
//! bound for greedy list scheduling covers it: at every moment before the
//! release finishes, either a release of its chain runs or every slot is busy
//! with another release, so it finishes within its chain plus the other
//! releases' budgets divided by `concurrency`
//! (R. L. Graham, "Bounds on multiprocessing timing anomalies", 1969). With
//! at most `concurrency` such releases no slot is ever contended and the term
//! is zero. The bound is taken per phase (bootstrap releases, then the
//! others), as no release of the second phase starts before the first ends.
//!
//! Pure: [`wait_timeouts`] takes the graph and budgets, and returns seconds.

use super::plan::{ATTEMPTS, NODE_READY_TIMEOUT_SECONDS, READYZ_TIMEOUT_SECONDS, RETRY_DELAY_SECONDS};

/// The reconciler's start, once per plan, before its first release: the
/// timer's next tick (a minute after the last run, two after a boot), the
/// bundle and the installer lock, `/readyz` (at most
/// [`READYZ_TIMEOUT_SECONDS`], after which the reconciler signals every
/// release FAILURE), the pinned helm client and, in Helm v2 mode, Tiller's
/// rollout (at most 300 s). Stated once: every wait condition includes it.
pub const RECONCILER_START_SECONDS: u64 = READYZ_TIMEOUT_SECONDS + 600;
/// Slack added to each release's own budget: the chart's fetch and sha256
/// check, its CRDs becoming Established, the status object and the signal.
pub const PER_RELEASE_SLACK_SECONDS: u64 = 180;
/// CloudFormation's longest CreationPolicy timeout (12 hours).
pub const MAX_WAIT_SECONDS: u64 = 12 * 3600;

/// One release's own budget: `helm upgrade --install --wait --timeout T`
/// tried [`ATTEMPTS`] times with the installer's growing pauses between
/// (src/node/kube_aws_node/retry.py), plus [`PER_RELEASE_SLACK_SECONDS`].
pub fn release_budget(timeout_seconds: u64) -> u64 {
    let attempts = u64::from(ATTEMPTS.max(1));
    let pauses: u64 = (1..attempts).map(|i| RETRY_DELAY_SECONDS * i).sum();
    timeout_seconds * attempts + pauses + PER_RELEASE_SLACK_SECONDS
}

/// A release as the timeout sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step<'a> {
    pub name: &'a str,
    pub depends_on: &'a [String],
    pub bootstrap: bool,
    /// Its own budget in seconds ([`release_budget`]).
    pub budget: u64,
}

/// What every release shares: the start allowance, the Ready-node gate
/// non-bootstrap releases pass, and how many releases install at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub start: u64,
    pub gate: u64,
    pub concurrency: u32,
}

impl Schedule {
    /// The reconciler's own figures.
    pub fn reconciler(concurrency: u32) -> Schedule {
        Schedule {
            start: RECONCILER_START_SECONDS,
            gate: NODE_READY_TIMEOUT_SECONDS,
            concurrency,
        }
    }
}

/// The wait-condition timeout of each release in seconds, in the order given,
/// rounded up to a whole minute and at most [`MAX_WAIT_SECONDS`].
///
/// The reconciler runs in two phases: the bootstrap releases (which depend
/// only on bootstrap releases: src/config/graph.rs), then, once every one of
/// them is done and the Ready-node gate is passed, the others. So a bootstrap
/// release waits for the start and its bound within the bootstrap phase; any
/// other release for the start, the whole bootstrap phase (its longest
/// bound), the gate, and its bound within the second phase. A dependency that
/// is not in `steps` adds nothing (render refuses one before this runs); a
/// cycle (also refused) is cut where it closes.
pub fn wait_timeouts(steps: &[Step], schedule: &Schedule) -> Vec<u64> {
    let m = u64::from(schedule.concurrency.max(1));
    let bootstrap: Vec<usize> = (0..steps.len()).filter(|&i| steps[i].bootstrap).collect();
    let rest: Vec<usize> = (0..steps.len()).filter(|&i| !steps[i].bootstrap).collect();
    let first = phase_bounds(steps, &bootstrap, m);
    let second = phase_bounds(steps, &rest, m);
    let bootstrap_phase = first.iter().copied().max().unwrap_or(0);
    let mut out = vec![0; steps.len()];
    for (k, &i) in bootstrap.iter().enumerate() {
        out[i] = schedule.start + first[k];
    }
    for (k, &i) in rest.iter().enumerate() {
        out[i] = schedule.start + bootstrap_phase + schedule.gate + second[k];
    }
    out.into_iter()
        .map(|secs| secs.div_ceil(60).saturating_mul(60).min(MAX_WAIT_SECONDS))
        .collect()
}

/// Within one phase (the releases `members`, started together): how long
/// after the phase starts each member is done at the latest, with `m` slots.
/// Its longest chain of budgets through `dependsOn` (within the phase), plus,
/// when more than `m` members could run before it is done (all but its
/// descendants), their other work divided by `m` (Graham's bound).
fn phase_bounds(steps: &[Step], members: &[usize], m: u64) -> Vec<u64> {
    let n = members.len();
    let local = |name: &str| members.iter().position(|&i| steps[i].name == name);
    let preds: Vec<Vec<usize>> = members
        .iter()
        .map(|&i| {
            let mut p: Vec<usize> = steps[i].depends_on.iter().filter_map(|d| local(d)).collect();
            p.sort_unstable();
            p.dedup();
            p
        })
        .collect();
    let budget = |k: usize| steps[members[k]].budget;
    // The longest chain of budgets ending at each member (memoised DFS).
    fn longest(
        k: usize,
        preds: &[Vec<usize>],
        budget: &dyn Fn(usize) -> u64,
        chain: &mut [Option<u64>],
        on: &mut [bool],
    ) -> u64 {
        if let Some(c) = chain[k] {
            return c;
        }
        if on[k] {
            return 0;
        }
        on[k] = true;
        let before = preds[k]
            .iter()
            .map(|&p| longest(p, preds, budget, chain, on))
            .max()
            .unwrap_or(0);
        on[k] = false;
        let c = before + budget(k);
        chain[k] = Some(c);
        c
    }
    let mut chain = vec![None; n];
    let mut on = vec![false; n];
    (0..n)
        .map(|k| {
            let path = longest(k, &preds, &budget, &mut chain, &mut on);
            let desc = descendants(k, &preds);
            let others: Vec<usize> = (0..n).filter(|j| !desc[*j]).collect();
            let queue = if others.len() as u64 <= m {
                0
            } else {
                let work: u64 = others.iter().map(|&j| budget(j)).sum();
                work.saturating_sub(path).div_ceil(m)
            };
            path + queue
        })
        .collect()
}

/// Which members come strictly after `k` (reach it through `preds`).
fn descendants(k: usize, preds: &[Vec<usize>]) -> Vec<bool> {
    let n = preds.len();
    let mut out = vec![false; n];
    let mut changed = true;
    while changed {
        changed = false;
        for j in 0..n {
            if !out[j] && j != k && preds[j].iter().any(|&p| p == k || out[p]) {
                out[j] = true;
                changed = true;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Schedule = Schedule {
        start: 600,
        gate: 120,
        concurrency: 4,
    };

    fn deps(d: &[&str]) -> Vec<String> {
        d.iter().map(|s| s.to_string()).collect()
    }

    fn run(specs: &[(&str, &[&str], bool, u64)], schedule: &Schedule) -> Vec<u64> {
        let owned: Vec<(String, Vec<String>, bool, u64)> = specs
            .iter()
            .map(|(n, d, b, t)| (n.to_string(), deps(d), *b, *t))
            .collect();
        let steps: Vec<Step> = owned
            .iter()
            .map(|(n, d, b, t)| Step {
                name: n,
                depends_on: d,
                bootstrap: *b,
                budget: *t,
            })
            .collect();
        wait_timeouts(&steps, schedule)
    }

    #[test]
    fn a_chain_adds_up_along_the_chain() {
        let t = run(
            &[
                ("a", &[], false, 300),
                ("b", &["a"], false, 600),
                ("c", &["b"], false, 60),
            ],
            &S,
        );
        assert_eq!(t, vec![600 + 120 + 300, 600 + 120 + 900, 600 + 120 + 960]);
    }

    #[test]
    fn a_diamond_takes_the_longer_branch_not_the_sum() {
        //   a
        //  / \
        // b   c     d waits for a + max(b, c) + d, not a + b + c + d
        //  \ /
        //   d
        let t = run(
            &[
                ("a", &[], false, 120),
                ("b", &["a"], false, 1200),
                ("c", &["a"], false, 300),
                ("d", &["b", "c"], false, 60),
            ],
            &S,
        );
        assert_eq!(t[3], 600 + 120 + 120 + 1200 + 60);
        assert_eq!(t[2], 600 + 120 + 120 + 300, "c does not wait for b");
    }

    #[test]
    fn independent_releases_wait_for_themselves_only() {
        let t = run(
            &[("a", &[], false, 1200), ("b", &[], false, 300), ("c", &[], false, 60)],
            &S,
        );
        assert_eq!(t, vec![600 + 120 + 1200, 600 + 120 + 300, 600 + 120 + 60]);
    }

    #[test]
    fn bootstrap_releases_come_first_and_skip_the_gate() {
        // cni is bootstrap: every other release waits for it and for the gate.
        let t = run(
            &[
                ("ccm", &[], true, 300),
                ("cni", &["ccm"], true, 600),
                ("app", &[], false, 60),
            ],
            &S,
        );
        assert_eq!(t, vec![600 + 300, 600 + 900, 600 + 120 + 900 + 60]);
    }

    #[test]
    fn more_releases_than_slots_add_their_share_of_the_queue() {
        // Six independent releases, two slots: one can wait behind the others.
        let specs: Vec<(&str, &[&str], bool, u64)> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|n| (*n, &[][..], false, 600))
            .collect();
        let two = Schedule { concurrency: 2, ..S };
        let t = run(&specs, &two);
        // Its own 600 plus (3600 - 600) / 2 of the others.
        assert!(t.iter().all(|&x| x == 600 + 120 + 600 + 1500), "{t:?}");
        // With six slots, nothing queues.
        let six = Schedule { concurrency: 6, ..S };
        assert!(run(&specs, &six).iter().all(|&x| x == 600 + 120 + 600));
    }

    #[test]
    fn descendants_do_not_queue_ahead() {
        // a's five dependants cannot run before a is done: a never queues.
        let specs: Vec<(&str, &[&str], bool, u64)> = vec![
            ("a", &[], false, 60),
            ("b", &["a"], false, 600),
            ("c", &["a"], false, 600),
            ("d", &["a"], false, 600),
            ("e", &["a"], false, 600),
            ("f", &["a"], false, 600),
        ];
        let two = Schedule { concurrency: 2, ..S };
        assert_eq!(run(&specs, &two)[0], 600 + 120 + 60);
    }

    #[test]
    fn the_bootstrap_phase_does_not_queue_with_the_rest() {
        // Two bootstrap releases and four others, four slots: the bootstrap
        // phase never fills the slots, the second has four releases: no queue.
        let specs: Vec<(&str, &[&str], bool, u64)> = vec![
            ("ccm", &[], true, 600),
            ("cni", &[], true, 900),
            ("a", &[], false, 300),
            ("b", &[], false, 300),
            ("c", &[], false, 300),
            ("d", &["cni"], false, 300),
        ];
        let t = run(&specs, &S);
        assert_eq!(t, vec![600 + 600, 600 + 900, 1920, 1920, 1920, 1920]);
        assert_eq!(1920, 600 + 900 + 120 + 300);
    }

    #[test]
    fn timeouts_round_up_to_minutes_and_stop_at_twelve_hours() {
        let t = run(&[("a", &[], true, 61), ("b", &["a"], true, 20 * 3600)], &S);
        assert_eq!(t, vec![600 + 120, MAX_WAIT_SECONDS]);
    }

    #[test]
    fn the_budget_is_every_attempt_their_pauses_and_the_slack() {
        assert_eq!(
            release_budget(300),
            300 * u64::from(ATTEMPTS) + (1..u64::from(ATTEMPTS)).map(|i| i * RETRY_DELAY_SECONDS).sum::<u64>() + 180
        );
    }
}
