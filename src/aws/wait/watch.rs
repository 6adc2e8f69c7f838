//! The loop that drives the pure wait logic: poll AWS (root stack, nested
//! stacks, their events, the addon status objects), assess, draw, sleep.
//!
//! Pacing: every DescribeStackEvents page costs at least 2 s of sleep (with
//! jitter upwards only, so the average never drops below 2 s); throttling
//! doubles the interval (up to a minute) and it decays back on success; network
//! errors and 5xx back off exponentially and, after a few in a row, end the wait
//! with [`AwsError::EndpointLost`]. The caller owns the timeout and Ctrl-C.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::aws::services::s3::{read_changed, Location};
use crate::aws::services::stack::{self, NestedStack};
use crate::aws::wait::{
    assess, AddonReport, Assessment, ExpectedAddon, NodeReport, Observation, Operation, Outcome, StackEvent,
};
use crate::aws::{AwsError, Clients};

/// Pacing of the polls. Pure: the caller supplies the jitter sample.
#[derive(Debug, Clone)]
pub struct Pacer {
    /// The floor per DescribeStackEvents page.
    pub min: Duration,
    pub max: Duration,
    interval: Duration,
    failures: u32,
    /// Consecutive network failures tolerated before giving up.
    pub max_failures: u32,
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer::new(Duration::from_secs(2), Duration::from_secs(60), 6)
    }
}

/// What happened on the last poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollResult {
    /// Success after reading this many DescribeStackEvents pages.
    Ok {
        pages: u32,
    },
    Throttled,
    NetworkError,
}

impl Pacer {
    pub fn new(min: Duration, max: Duration, max_failures: u32) -> Pacer {
        Pacer {
            min,
            max,
            interval: min,
            failures: 0,
            max_failures,
        }
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The sleep after a poll; None: too many network failures in a row, give up.
    /// `jitter` is a sample in [0, 1).
    pub fn next_delay(&mut self, result: PollResult, jitter: f64) -> Option<Duration> {
        let factor = 1.0 + 0.5 * jitter.clamp(0.0, 1.0);
        match result {
            PollResult::Ok { pages } => {
                self.failures = 0;
                // Decay back towards the floor after throttling.
                self.interval = self.interval.mul_f64(0.75).max(self.min);
                Some(self.interval.mul_f64(factor) * pages.max(1))
            }
            PollResult::Throttled => {
                self.interval = (self.interval * 2).min(self.max);
                Some(self.interval.mul_f64(factor))
            }
            PollResult::NetworkError => {
                self.failures += 1;
                if self.failures > self.max_failures {
                    return None;
                }
                let backoff = self.min * 2u32.saturating_pow(self.failures.min(16));
                Some(backoff.min(self.max).mul_f64(factor))
            }
        }
    }
}

/// Where observations come from (AWS, or a recorded script in tests).
pub trait Source {
    /// Observes once; returns the observation and how many event pages it read.
    fn observe(&mut self) -> impl std::future::Future<Output = Result<(Observation, u32), AwsError>>;
}

/// Time, for the loop (real, or virtual in tests).
pub trait Clock {
    fn elapsed(&self) -> Duration;
    fn sleep(&mut self, d: Duration) -> impl std::future::Future<Output = ()>;
}

/// The real clock.
pub struct TokioClock(tokio::time::Instant);

impl TokioClock {
    pub fn start() -> TokioClock {
        TokioClock(tokio::time::Instant::now())
    }
}

impl Clock for TokioClock {
    fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
    async fn sleep(&mut self, d: Duration) {
        tokio::time::sleep(d).await
    }
}

/// Follows the source to a terminal outcome, calling `draw` after each
/// successful poll. Returns the last assessment (Done, Failed or TimedOut), or
/// an error when the endpoint stays unreachable or a call is refused.
pub async fn drive<S: Source, C: Clock>(
    source: &mut S,
    clock: &mut C,
    pacer: &mut Pacer,
    timeout: Option<Duration>,
    mut draw: impl FnMut(&Assessment),
) -> Result<Assessment, AwsError> {
    let mut last_error = String::new();
    loop {
        let result = match source.observe().await {
            Ok((mut obs, pages)) => {
                obs.elapsed_secs = clock.elapsed().as_secs();
                obs.timeout_secs = timeout.map(|t| t.as_secs());
                let a = assess(&obs);
                draw(&a);
                if a.outcome != Outcome::InProgress {
                    return Ok(a);
                }
                PollResult::Ok { pages }
            }
            Err(e) if e.is_throttling() => PollResult::Throttled,
            Err(e) if e.is_transient() => {
                last_error = e.to_string();
                PollResult::NetworkError
            }
            Err(e) => return Err(e),
        };
        let Some(delay) = pacer.next_delay(result, fastrand::f64()) else {
            return Err(AwsError::EndpointLost { detail: last_error });
        };
        if let Some(t) = timeout {
            if clock.elapsed() >= t {
                // Polls kept failing up to the limit: a timeout, naming nothing new.
                return Ok(Assessment {
                    progress: Default::default(),
                    outcome: Outcome::TimedOut {
                        pending: vec![if last_error.is_empty() {
                            "AWS throttled every poll".to_string()
                        } else {
                            format!("no answer from AWS ({last_error})")
                        }],
                    },
                });
            }
        }
        clock.sleep(delay).await;
    }
}

/// Observes the real stacks and status objects.
pub struct AwsSource<'a> {
    pub clients: &'a Clients,
    /// The root stack's name or ID (an ID still works after a delete).
    pub stack: String,
    pub operation: Operation,
    pub location: Location,
    pub addons: Vec<ExpectedAddon>,
    events: BTreeMap<String, StackEvent>,
    /// Nested stacks whose events were read after they finished.
    settled: HashSet<String>,
    reports: BTreeMap<String, (String, AddonReport)>,
    node_reports: BTreeMap<String, (String, NodeReport)>,
}

/// At most this many event pages per stack per poll; the rest comes next poll.
const MAX_PAGES_PER_STACK: u32 = 5;

impl<'a> AwsSource<'a> {
    pub fn new(
        clients: &'a Clients,
        stack: String,
        operation: Operation,
        location: Location,
        addons: Vec<ExpectedAddon>,
    ) -> AwsSource<'a> {
        AwsSource {
            clients,
            stack,
            operation,
            location,
            addons,
            events: BTreeMap::new(),
            settled: HashSet::new(),
            reports: BTreeMap::new(),
            node_reports: BTreeMap::new(),
        }
    }

    /// Reads new events of one stack (newest first), until a known event, the
    /// start of the current operation, or the page budget.
    async fn read_events(&mut self, stack: &str) -> Result<u32, AwsError> {
        let mut token = None;
        let mut pages = 0;
        loop {
            let (page, next) = stack::events_page(self.clients, stack, token).await?;
            pages += 1;
            let mut stop = false;
            for e in page {
                if self.events.contains_key(&e.event_id) {
                    stop = true;
                    continue;
                }
                let start = e.logical_id == e.stack_name
                    && e.resource_type == "AWS::CloudFormation::Stack"
                    && e.reason.as_deref() == Some("User Initiated");
                if start {
                    stop = true;
                }
                self.events.insert(e.event_id.clone(), e);
            }
            if stop || next.is_none() || pages >= MAX_PAGES_PER_STACK {
                return Ok(pages);
            }
            token = next;
        }
    }

    /// Reads the addon status objects that changed since the last poll.
    async fn read_reports(&mut self) -> Result<(), AwsError> {
        if self.addons.is_empty() {
            return Ok(());
        }
        let prefix = self.location.key(ADDON_STATUS_DIR);
        read_changed(self.clients, &self.location.bucket, &prefix, &mut self.reports).await?;
        for (release, (_, r)) in self.reports.iter_mut() {
            if r.release.is_empty() {
                r.release = release.clone();
            }
        }
        Ok(())
    }

    /// The control plane's upgrade record, read only once a controller of
    /// the current operation published a failure report (one GetObject per
    /// poll from then on; the wait ends soon after). A read that fails is
    /// None: the record only adds a line to the failure, it decides nothing.
    async fn read_upgrade(&self) -> Option<crate::aws::state::control_plane_status::UpgradeRecord> {
        if !self.node_reports.values().any(|(_, r)| r.role == "controller") {
            return None;
        }
        let reports: Vec<NodeReport> = self.node_reports.values().map(|(_, r)| r.clone()).collect();
        let events: Vec<StackEvent> = self.events.values().cloned().collect();
        let current = crate::aws::wait::node_reports_since(&reports, crate::aws::wait::operation_start(&events));
        if !crate::aws::wait::controller_failed(&current) {
            return None;
        }
        crate::aws::state::control_plane_status::read_upgrade(self.clients, &self.location).await
    }

    /// Reads the node failure reports that changed since the last poll.
    async fn read_node_reports(&mut self) -> Result<(), AwsError> {
        let prefix = self.location.key(NODE_REPORTS);
        read_changed(self.clients, &self.location.bucket, &prefix, &mut self.node_reports).await
    }
}

use crate::render::layout::{ADDON_STATUS_DIR, NODE_REPORTS_DIR as NODE_REPORTS};

impl Source for AwsSource<'_> {
    async fn observe(&mut self) -> Result<(Observation, u32), AwsError> {
        let root = stack::describe_stack(self.clients, &self.stack).await?;
        let mut pages = 0;
        let mut nested: Vec<NestedStack> = Vec::new();
        if let Some(info) = &root {
            // Follow the ID: after a delete the name no longer resolves.
            if !info.stack_id.is_empty() {
                self.stack = info.stack_id.clone();
            }
            let id = self.stack.clone();
            pages += self.read_events(&id).await?;
            nested = stack::nested_stacks(self.clients, &id).await?;
            for n in &nested {
                if n.stack_id.is_empty() || self.settled.contains(&n.stack_id) {
                    continue;
                }
                pages += self.read_events(&n.stack_id).await?;
                if n.status.ends_with("_COMPLETE") || n.status.ends_with("_FAILED") {
                    self.settled.insert(n.stack_id.clone());
                }
            }
            self.read_reports().await?;
            self.read_node_reports().await?;
        }
        let upgrade = self.read_upgrade().await;
        let obs = Observation {
            operation: self.operation,
            root: root.map(|i| crate::aws::wait::StackState {
                name: "root".into(),
                status: i.status,
                reason: i.reason,
            }),
            nested: nested.iter().map(NestedStack::state).collect(),
            events: self.events.values().cloned().collect(),
            addons: self.addons.clone(),
            reports: self.reports.values().map(|(_, r)| r.clone()).collect(),
            node_reports: self.node_reports.values().map(|(_, r)| r.clone()).collect(),
            upgrade,
            elapsed_secs: 0,
            timeout_secs: None,
        };
        Ok((obs, pages))
    }
}

/// Reads every addon status object once (for `status` without --wait).
pub async fn read_addon_reports(
    clients: &Clients,
    location: &Location,
    addons: &[ExpectedAddon],
) -> Result<Vec<AddonReport>, AwsError> {
    let mut src = AwsSource::new(
        clients,
        String::new(),
        Operation::Create,
        location.clone(),
        addons.to_vec(),
    );
    src.read_reports().await?;
    Ok(src.reports.into_values().map(|(_, r)| r).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::wait::{AddonPhase, StackState};

    struct Script {
        steps: Vec<Result<(Observation, u32), AwsError>>,
        polls: usize,
    }

    impl Source for Script {
        async fn observe(&mut self) -> Result<(Observation, u32), AwsError> {
            self.polls += 1;
            if self.steps.is_empty() {
                panic!("the loop polled past the end of the script");
            }
            self.steps.remove(0)
        }
    }

    #[derive(Default)]
    struct FakeClock {
        now: Duration,
        sleeps: Vec<Duration>,
    }

    impl Clock for FakeClock {
        fn elapsed(&self) -> Duration {
            self.now
        }
        async fn sleep(&mut self, d: Duration) {
            self.sleeps.push(d);
            self.now += d;
        }
    }

    fn obs(status: &str) -> Observation {
        Observation {
            operation: Operation::Create,
            root: Some(StackState {
                name: "root".into(),
                status: status.into(),
                reason: None,
            }),
            nested: vec![],
            events: vec![],
            addons: vec![],
            reports: vec![],
            node_reports: vec![],
            upgrade: None,
            elapsed_secs: 0,
            timeout_secs: None,
        }
    }

    fn throttled() -> AwsError {
        AwsError::Throttled {
            operation: "cloudformation:DescribeStackEvents".into(),
        }
    }

    fn network() -> AwsError {
        AwsError::Network {
            operation: "cloudformation:DescribeStacks".into(),
            detail: "connection refused".into(),
        }
    }

    fn run(
        script: Vec<Result<(Observation, u32), AwsError>>,
        timeout: Option<Duration>,
    ) -> (Result<Assessment, AwsError>, FakeClock, usize) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut src = Script {
            steps: script,
            polls: 0,
        };
        let mut clock = FakeClock::default();
        let mut pacer = Pacer::default();
        let r = rt.block_on(drive(&mut src, &mut clock, &mut pacer, timeout, |_| {}));
        (r, clock, src.polls)
    }

    #[test]
    fn pages_average_at_least_two_seconds() {
        let mut script: Vec<_> = (0..20).map(|_| Ok((obs("CREATE_IN_PROGRESS"), 3))).collect();
        script.push(Ok((obs("CREATE_COMPLETE"), 1)));
        let (r, clock, polls) = run(script, None);
        assert_eq!(r.unwrap().outcome, Outcome::Done);
        assert_eq!(polls, 21);
        let pages = 20 * 3;
        assert!(
            clock.now >= Duration::from_secs(2) * pages,
            "{:?} for {pages} pages",
            clock.now
        );
    }

    /// Throttling slows the loop down and it keeps going; it speeds up again after.
    #[test]
    fn throttling_slows_down_and_keeps_going() {
        let mut script = vec![Ok((obs("CREATE_IN_PROGRESS"), 1))];
        script.extend((0..8).map(|_| Err(throttled())));
        script.extend((0..6).map(|_| Ok((obs("CREATE_IN_PROGRESS"), 1))));
        script.push(Ok((obs("CREATE_COMPLETE"), 1)));
        let (r, clock, polls) = run(script, None);
        assert_eq!(r.unwrap().outcome, Outcome::Done);
        assert_eq!(polls, 16);
        let s = &clock.sleeps;
        // Growing while throttled, capped at a minute (times the jitter).
        assert!(s[1] > s[0] && s[2] > s[1], "{s:?}");
        assert!(
            s[8] >= Duration::from_secs(60) && s[8] <= Duration::from_secs(90),
            "{s:?}"
        );
        // Decaying afterwards.
        assert!(s[14] < s[9], "{s:?}");
    }

    /// The endpoint dies mid-wait: back off, then give up with its own error.
    #[test]
    fn endpoint_dying_mid_wait_gives_up_after_backoff() {
        let mut script = vec![Ok((obs("CREATE_IN_PROGRESS"), 1))];
        script.extend((0..7).map(|_| Err(network())));
        let (r, clock, polls) = run(script, None);
        let err = r.unwrap_err();
        assert!(matches!(err, AwsError::EndpointLost { .. }), "{err}");
        assert!(err.to_string().contains("kube-aws status --wait"));
        assert!(err.to_string().contains("connection refused"));
        assert_eq!(polls, 8);
        // Exponential backoff (2 s per event page, then 4, 8, … capped at 60 s,
        // jitter upwards): about three minutes of trying before giving up.
        assert_eq!(clock.sleeps.len(), 7);
        assert!(
            clock.sleeps[2] >= clock.sleeps[1].mul_f64(2.0 / 1.5),
            "{:?}",
            clock.sleeps
        );
        assert!(
            clock.now >= Duration::from_secs(182) && clock.now <= Duration::from_secs(273),
            "{:?}",
            clock.now
        );
    }

    /// It comes back before the limit: the wait carries on.
    #[test]
    fn endpoint_coming_back_resumes() {
        let script = vec![
            Err(network()),
            Err(network()),
            Ok((obs("CREATE_IN_PROGRESS"), 1)),
            Err(network()),
            Ok((obs("CREATE_COMPLETE"), 1)),
        ];
        let (r, _, _) = run(script, None);
        assert_eq!(r.unwrap().outcome, Outcome::Done);
    }

    #[test]
    fn the_callers_timeout_ends_the_wait() {
        let script: Vec<_> = (0..100).map(|_| Ok((obs("CREATE_IN_PROGRESS"), 1))).collect();
        let (r, clock, polls) = run(script, Some(Duration::from_secs(30)));
        assert!(matches!(r.unwrap().outcome, Outcome::TimedOut { .. }));
        assert!(clock.now >= Duration::from_secs(30) && polls < 20);
    }

    #[test]
    fn an_addon_failure_ends_the_wait_with_its_reason() {
        let mut failing = obs("CREATE_IN_PROGRESS");
        failing.addons = vec![ExpectedAddon {
            release: "dex".into(),
            wait_condition: None,
            wait_timeout_secs: None,
        }];
        failing.reports = vec![AddonReport {
            release: "dex".into(),
            phase: AddonPhase::Failed,
            message: "Error: INSTALLATION FAILED: timed out".into(),
            started_at: None,
            updated_at: None,
        }];
        let (r, _, polls) = run(vec![Ok((obs("CREATE_IN_PROGRESS"), 1)), Ok((failing, 1))], None);
        let Outcome::Failed(f) = r.unwrap().outcome else {
            panic!()
        };
        assert_eq!(f.addon.as_deref(), Some("dex"));
        assert_eq!(polls, 2);
    }

    #[test]
    fn a_refused_call_is_not_retried() {
        let err = AwsError::Api {
            operation: "cloudformation:DescribeStacks".into(),
            code: "AccessDenied".into(),
            message: "no".into(),
        };
        let (r, _, polls) = run(vec![Err(err)], None);
        assert!(matches!(r.unwrap_err(), AwsError::Api { .. }));
        assert_eq!(polls, 1);
    }
}
