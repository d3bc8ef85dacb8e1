//! Sessions a long-lived host keeps between commands (the MCP server): each file is loaded
//! once and kept while its size and modification time hold, the least recently asked
//! about dropped beyond a limit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use crate::session::Session;

/// A kept file.
struct Kept {
    /// Size and modification time when it was loaded.
    identity: (u64, Option<SystemTime>),
    session: Arc<Session>,
    /// When it was last asked about (a counter).
    used: u64,
}

/// The kept sessions, by absolute path.
pub struct Sessions {
    limit: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    files: HashMap<PathBuf, Kept>,
    /// Times each file was loaded while this host ran.
    loads: std::collections::BTreeMap<PathBuf, u64>,
    clock: u64,
}

static SESSIONS: OnceLock<Sessions> = OnceLock::new();

/// The host's kept sessions, when a host keeps them.
pub fn sessions() -> Option<&'static Sessions> {
    SESSIONS.get()
}

/// Makes every later [`super::output::open`] keep its file, at most `limit` files at once.
pub fn keep(limit: usize) -> &'static Sessions {
    SESSIONS.get_or_init(|| Sessions {
        limit: limit.max(1),
        state: Mutex::new(State::default()),
    })
}

fn identity(path: &Path) -> (u64, Option<SystemTime>) {
    std::fs::metadata(path).map_or((0, None), |m| (m.len(), m.modified().ok()))
}

impl Sessions {
    /// The session of `path`: the kept one while the file is unchanged, else loaded by
    /// `load` (outside the lock, so other files are served meanwhile) and kept.
    pub fn open(
        &self,
        path: &Path,
        load: impl FnOnce(&Path) -> anyhow::Result<Session>,
    ) -> anyhow::Result<Arc<Session>> {
        let key = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let now = identity(&key);
        {
            let mut st = self.lock();
            st.clock += 1;
            let clock = st.clock;
            if let Some(k) = st.files.get_mut(&key)
                && k.identity == now
            {
                k.used = clock;
                return Ok(Arc::clone(&k.session));
            }
        }
        let session = Arc::new(load(path)?);
        let mut st = self.lock();
        *st.loads.entry(key.clone()).or_default() += 1;
        let used = st.clock;
        st.files.insert(
            key,
            Kept {
                identity: now,
                session: Arc::clone(&session),
                used,
            },
        );
        while st.files.len() > self.limit {
            let oldest = st
                .files
                .iter()
                .min_by_key(|(_, k)| k.used)
                .map(|(p, _)| p.clone());
            match oldest {
                Some(p) => st.files.remove(&p),
                None => break,
            };
        }
        Ok(session)
    }

    /// The kept files, by path.
    pub fn files(&self) -> Vec<(PathBuf, Arc<Session>)> {
        let st = self.lock();
        let mut v: Vec<_> = st
            .files
            .iter()
            .map(|(p, k)| (p.clone(), Arc::clone(&k.session)))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// How many times each file was loaded.
    pub fn loads(&self) -> Vec<(PathBuf, u64)> {
        self.lock()
            .loads
            .iter()
            .map(|(p, n)| (p.clone(), *n))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A command that panicked left the map as it was: still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
