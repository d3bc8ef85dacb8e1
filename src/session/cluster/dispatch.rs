//! Which machine runs which job of a run spread over a cluster, and what happens to a job
//! when its machine leaves. Python's `leakscope.ray` only starts the tasks this names and
//! reports how each ended; the policy is here, where it is tested without a cluster.
//!
//! The rules:
//! - a job runs only on a machine that holds its input (a node-local disk);
//! - a machine runs at most its limit of jobs at once, taking the largest it can see
//!   first, so that the last to finish is a small one;
//! - a job whose machine left the cluster runs again on another holder, [`TRIES`] times
//!   at most; one that failed otherwise keeps its error (a file that crashed its worker
//!   would crash the next one too);
//! - a job that no machine still in the cluster holds ends with the error its machine
//!   left with.

use crate::model::fxhash::FastMap;

/// How many times a job is started at most (the first run and the reruns after a machine
/// left).
pub const TRIES: u32 = 3;

/// A unit of work: the machines that hold its input, and its size (larger runs first).
#[derive(Clone, Debug)]
pub struct Job {
    /// The machines that can read its input.
    pub holders: Vec<String>,
    /// Its input's bytes.
    pub size: u64,
}

/// A job that ended without a result: the machine it last ran on (or its first holder)
/// and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    /// The job's index, as given to [`Dispatch::new`].
    pub job: usize,
    /// The machine it last ran on, or its first holder when it never ran.
    pub machine: String,
    /// Why it has no result.
    pub error: String,
}

/// A machine of the cluster, as the dispatch sees it.
#[derive(Debug)]
struct Machine {
    name: String,
    limit: usize,
    busy: usize,
    /// Why it left, once it has.
    left: Option<String>,
}

/// The state of a run's jobs over the machines.
#[derive(Debug)]
pub struct Dispatch {
    jobs: Vec<Job>,
    tries: Vec<u32>,
    /// The machine each job runs on now (an index into `machines`).
    running: Vec<Option<usize>>,
    /// Jobs waiting to start, largest first.
    pending: Vec<usize>,
    machines: Vec<Machine>,
    by_name: FastMap<String, usize>,
    ended: Vec<Ended>,
}

impl Dispatch {
    /// `limits`: each machine of the cluster with the jobs it runs at once (at least one),
    /// in the order machines are offered work.
    ///
    /// ```
    /// use leakscope::session::cluster::dispatch::{Dispatch, Job};
    /// let job = |holders: &[&str], size| Job { holders: holders.iter().map(|h| h.to_string()).collect(), size };
    /// let mut d = Dispatch::new(vec![job(&["a"], 10), job(&["a", "b"], 30)],
    ///                           vec![("a".into(), 1), ("b".into(), 1)]);
    /// // "a" takes the largest job it holds; "b" the next one it holds: none left.
    /// assert_eq!(d.start(), vec![(1, "a".to_string())]);
    /// d.succeeded(1);
    /// assert_eq!(d.start(), vec![(0, "a".to_string())]);
    /// ```
    pub fn new(jobs: Vec<Job>, limits: Vec<(String, usize)>) -> Self {
        let mut pending: Vec<usize> = (0..jobs.len()).collect();
        pending.sort_by_key(|&j| std::cmp::Reverse(jobs[j].size));
        let machines: Vec<Machine> = limits
            .into_iter()
            .map(|(name, limit)| Machine {
                name,
                limit: limit.max(1),
                busy: 0,
                left: None,
            })
            .collect();
        let by_name = machines
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name.clone(), i))
            .collect();
        Dispatch {
            tries: vec![0; jobs.len()],
            running: vec![None; jobs.len()],
            jobs,
            pending,
            machines,
            by_name,
            ended: Vec::new(),
        }
    }

    fn machine(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// Whether `name` is a machine of the cluster that has not left.
    pub fn alive(&self, name: &str) -> bool {
        self.machine(name)
            .is_some_and(|m| self.machines[m].left.is_none())
    }

    fn held_by_alive(&self, job: usize) -> bool {
        self.jobs[job].holders.iter().any(|h| self.alive(h))
    }

    /// The jobs to start now, each with its machine: every machine still in the cluster
    /// fills its free slots with the largest jobs it holds. Jobs that no such machine
    /// holds end here (see [`Dispatch::take_ended`]).
    pub fn start(&mut self) -> Vec<(usize, String)> {
        let mut started = Vec::new();
        for m in 0..self.machines.len() {
            while self.machines[m].left.is_none() && self.machines[m].busy < self.machines[m].limit
            {
                let name = &self.machines[m].name;
                let Some(at) = self
                    .pending
                    .iter()
                    .position(|&j| self.jobs[j].holders.iter().any(|h| h == name))
                else {
                    break;
                };
                let job = self.pending.remove(at);
                self.tries[job] += 1;
                self.running[job] = Some(m);
                self.machines[m].busy += 1;
                started.push((job, self.machines[m].name.clone()));
            }
        }
        let (orphans, kept): (Vec<usize>, Vec<usize>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|&j| !self.held_by_alive(j));
        self.pending = kept;
        for job in orphans {
            let holder = self.jobs[job].holders.first().cloned().unwrap_or_default();
            let error = match self.machine(&holder) {
                Some(m) => self.machines[m].left.clone(),
                None => None,
            }
            .unwrap_or_else(|| format!("no machine in the cluster holds it (held by {holder})"));
            self.end(job, holder, error);
        }
        started
    }

    fn stop(&mut self, job: usize) -> Option<usize> {
        let m = self.running[job].take()?;
        self.machines[m].busy = self.machines[m].busy.saturating_sub(1);
        Some(m)
    }

    fn end(&mut self, job: usize, machine: String, error: String) {
        self.ended.push(Ended {
            job,
            machine,
            error,
        });
    }

    /// `job` finished with its result.
    pub fn succeeded(&mut self, job: usize) {
        self.stop(job);
    }

    /// `job` failed with `error`; `machine_left`: its machine has left the cluster (the
    /// first error a machine left with is the one its orphaned jobs keep). A job whose
    /// machine left runs again on another holder while it has tries left.
    pub fn failed(&mut self, job: usize, error: String, machine_left: bool) {
        let Some(m) = self.stop(job) else { return };
        if machine_left && self.machines[m].left.is_none() {
            self.machines[m].left = Some(error.clone());
        }
        let rerun =
            self.machines[m].left.is_some() && self.held_by_alive(job) && self.tries[job] < TRIES;
        if rerun {
            // Back in size order, so the next free slot still takes the largest job.
            let size = self.jobs[job].size;
            let at = self.pending.partition_point(|&j| self.jobs[j].size >= size);
            self.pending.insert(at, job);
        } else {
            let name = self.machines[m].name.clone();
            self.end(job, name, error);
        }
    }

    /// `job`'s machine left the cluster without the job failing (it was given up on):
    /// ends or reruns it as [`Dispatch::failed`] does, with the error the machine left
    /// with, `error` when this is the first news of it.
    pub fn lost(&mut self, job: usize, error: String) {
        let known = self.running[job].and_then(|m| self.machines[m].left.clone());
        self.failed(job, known.unwrap_or(error), true);
    }

    /// The jobs that ended without a result since the last call, in the order they did.
    pub fn take_ended(&mut self) -> Vec<Ended> {
        std::mem::take(&mut self.ended)
    }

    /// Whether every job has ended or finished (nothing waits or runs).
    pub fn done(&self) -> bool {
        self.pending.is_empty() && self.running.iter().all(Option::is_none)
    }
}

/// A machine's share of an export: the jobs it exports, whether they are all the run's
/// files it holds (then it exports the run's directory itself, so the tables carry each
/// file's rank and step), and their bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Share {
    /// The machine that exports.
    pub machine: String,
    /// The jobs it exports (indices into the jobs given).
    pub jobs: Vec<usize>,
    /// Whether they are every job it holds.
    pub whole: bool,
    /// Their bytes.
    pub size: u64,
}

/// Who exports which file, each once: on a shared file system one machine (`here` when
/// it is one of `machines`, else the first) takes them all; otherwise each file, largest
/// first, goes to the holder with the fewest bytes so far. Machines with nothing to do
/// are left out.
///
/// ```
/// use leakscope::session::cluster::dispatch::{Job, export_shares};
/// let job = |holders: &[&str], size| Job { holders: holders.iter().map(|h| h.to_string()).collect(), size };
/// let machines = ["a".to_string(), "b".to_string()];
/// let shares = export_shares(&[job(&["a", "b"], 50), job(&["a", "b"], 40), job(&["a"], 20)],
///                            &machines, None, false);
/// // 50 to "a", 40 to "b" (fewer bytes), 20 only "a" holds.
/// assert_eq!(shares.iter().map(|s| (s.machine.as_str(), s.size)).collect::<Vec<_>>(),
///            [("a", 70), ("b", 40)]);
/// ```
pub fn export_shares(
    jobs: &[Job],
    machines: &[String],
    here: Option<&str>,
    shared: bool,
) -> Vec<Share> {
    let mut load: Vec<(u64, Vec<usize>)> = vec![(0, Vec::new()); machines.len()];
    let index = |name: &str| machines.iter().position(|m| m == name);
    if shared {
        let m = here.and_then(index).unwrap_or(0);
        if let Some(slot) = load.get_mut(m) {
            slot.1 = (0..jobs.len()).collect();
            slot.0 = jobs.iter().map(|j| j.size).sum();
        }
    } else {
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by_key(|&j| std::cmp::Reverse(jobs[j].size));
        for j in order {
            let least = jobs[j]
                .holders
                .iter()
                .filter_map(|h| index(h))
                .min_by_key(|&m| (load[m].0, m));
            if let Some(m) = least {
                load[m].0 += jobs[j].size;
                load[m].1.push(j);
            }
        }
    }
    machines
        .iter()
        .zip(load)
        .filter(|(_, (_, mine))| !mine.is_empty())
        .map(|(name, (size, mine))| {
            let held = jobs.iter().filter(|j| j.holders.contains(name)).count();
            Share {
                whole: mine.len() == held,
                machine: name.clone(),
                jobs: mine,
                size,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(holders: &[&str], size: u64) -> Job {
        Job {
            holders: holders.iter().map(|h| h.to_string()).collect(),
            size,
        }
    }

    fn limits(l: &[(&str, usize)]) -> Vec<(String, usize)> {
        l.iter().map(|(n, k)| (n.to_string(), *k)).collect()
    }

    /// Jobs on machines, as `start` names them.
    fn on(pairs: &[(usize, &str)]) -> Vec<(usize, String)> {
        pairs.iter().map(|&(j, m)| (j, m.to_string())).collect()
    }

    #[test]
    fn largest_first_within_each_limit() {
        let jobs = vec![
            job(&["a", "b"], 1),
            job(&["a", "b"], 5),
            job(&["a", "b"], 3),
            job(&["a", "b"], 4),
        ];
        let mut d = Dispatch::new(jobs, limits(&[("a", 2), ("b", 1)]));
        assert_eq!(d.start(), on(&[(1, "a"), (3, "a"), (2, "b")]));
        assert!(d.start().is_empty());
        d.succeeded(3);
        assert_eq!(d.start(), on(&[(0, "a")]));
        for j in [0, 1, 2] {
            d.succeeded(j);
        }
        assert!(d.done());
        assert!(d.take_ended().is_empty());
    }

    #[test]
    fn a_job_whose_machine_left_reruns_on_another_holder() {
        let mut d = Dispatch::new(vec![job(&["a", "b"], 10)], limits(&[("a", 1), ("b", 1)]));
        assert_eq!(d.start(), on(&[(0, "a")]));
        d.failed(0, "a died".into(), true);
        assert!(!d.alive("a"));
        assert_eq!(d.start(), on(&[(0, "b")]));
        d.succeeded(0);
        assert!(d.done() && d.take_ended().is_empty());
    }

    #[test]
    fn a_job_that_failed_on_a_live_machine_is_not_rerun() {
        let mut d = Dispatch::new(vec![job(&["a", "b"], 10)], limits(&[("a", 1), ("b", 1)]));
        d.start();
        d.failed(0, "bad file".into(), false);
        assert!(d.start().is_empty());
        let ended = d.take_ended();
        assert_eq!(
            ended,
            [Ended {
                job: 0,
                machine: "a".into(),
                error: "bad file".into()
            }]
        );
        assert!(d.done());
    }

    #[test]
    fn reruns_stop_after_the_tries() {
        let names = ["m0", "m1", "m2", "m3"];
        let mut d = Dispatch::new(
            vec![job(&names, 1)],
            names.iter().map(|n| (n.to_string(), 1)).collect(),
        );
        for round in 0..TRIES {
            let s = d.start();
            assert_eq!(s.len(), 1, "round {round}");
            d.failed(0, format!("{} left", s[0].1), true);
        }
        assert!(d.start().is_empty());
        let ended = d.take_ended();
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].error, "m2 left");
        assert!(d.alive("m3") && d.done());
    }

    #[test]
    fn files_only_a_lost_machine_holds_end_with_its_error() {
        // "a" runs one job at a time: the second waits, and is orphaned when "a" leaves.
        let mut d = Dispatch::new(
            vec![job(&["a"], 2), job(&["a"], 1), job(&["b"], 1)],
            limits(&[("a", 1), ("b", 1)]),
        );
        assert_eq!(d.start(), on(&[(0, "a"), (2, "b")]));
        d.lost(0, "a left the cluster".into());
        assert!(d.start().is_empty());
        let ended = d.take_ended();
        let errors: Vec<(usize, &str)> = ended.iter().map(|e| (e.job, e.error.as_str())).collect();
        assert_eq!(
            errors,
            [(0, "a left the cluster"), (1, "a left the cluster")]
        );
        d.succeeded(2);
        assert!(d.done());
    }

    #[test]
    fn the_first_error_a_machine_left_with_is_kept() {
        let mut d = Dispatch::new(vec![job(&["a"], 2), job(&["a"], 1)], limits(&[("a", 2)]));
        d.start();
        d.failed(0, "worker crashed: node gone".into(), true);
        d.lost(1, "timed out".into());
        let errors: Vec<String> = d.take_ended().into_iter().map(|e| e.error).collect();
        assert_eq!(
            errors,
            ["worker crashed: node gone", "worker crashed: node gone"]
        );
    }

    #[test]
    fn export_shares_spread_by_bytes_and_say_whole() {
        let machines: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let jobs = [
            job(&["a", "b"], 50),
            job(&["a", "b"], 40),
            job(&["a"], 20),
            job(&["b"], 5),
        ];
        let s = export_shares(&jobs, &machines, None, false);
        // 50 -> a (both 0, first), 40 -> b, 20 -> a (only holder), 5 -> b.
        assert_eq!(
            s[0],
            Share {
                machine: "a".into(),
                jobs: vec![0, 2],
                whole: false,
                size: 70
            }
        );
        assert_eq!(
            s[1],
            Share {
                machine: "b".into(),
                jobs: vec![1, 3],
                whole: false,
                size: 45
            }
        );
        let shared = export_shares(&jobs[..2], &machines, Some("b"), true);
        assert_eq!(
            shared,
            [Share {
                machine: "b".into(),
                jobs: vec![0, 1],
                whole: true,
                size: 90
            }]
        );
        let own = export_shares(&[job(&["a"], 3), job(&["b"], 4)], &machines, None, false);
        assert!(own.iter().all(|s| s.whole));
    }
}
