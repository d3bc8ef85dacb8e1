//! Stack interning on the second core. Hash-consing every frames list (real snapshots
//! write a fresh list per event) is a fifth of the load; the reader hands each list to a
//! worker thread and carries on with a *ticket* (a provisional [`StackId`], sequential),
//! which is translated to the interned id once parsing ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use crate::model::{FrameId, StackId, StackTable};

/// Words per batch sent to the worker (`[len, frame ids...]` records).
const BATCH_WORDS: usize = 1 << 16;
/// Batches in flight: bounds the memory between the two threads.
const IN_FLIGHT: usize = 8;

enum Msg {
    Batch(Vec<u32>),
    /// The frames of a ticket, answered once every earlier batch is processed.
    Query(u32, SyncSender<Vec<FrameId>>),
}

/// The reader's side: issues tickets, batches frames lists for the worker.
pub(crate) struct StackInterner {
    /// Interning done inline, when no worker thread is wanted (many files loaded at once).
    inline: Option<(StackTable, Vec<StackId>)>,
    tx: Option<SyncSender<Msg>>,
    /// Buffers the worker is done with, reused so that no batch touches fresh pages.
    spare: Receiver<Vec<u32>>,
    worker: Option<JoinHandle<(StackTable, Vec<StackId>)>>,
    buf: Vec<u32>,
    next_ticket: u32,
    /// Answers to [`StackInterner::frames`] so far: a shared stack kept as data may be
    /// asked for many times, and each question is a round trip to the worker.
    answered: crate::model::fxhash::FastMap<u32, Vec<FrameId>>,
    answered_bytes: usize,
    /// Bytes the worker's table and ticket ids hold, as it last published them.
    worker_held: Arc<AtomicUsize>,
}

fn work(
    rx: Receiver<Msg>,
    spare: SyncSender<Vec<u32>>,
    held: Arc<AtomicUsize>,
) -> (StackTable, Vec<StackId>) {
    let mut table = StackTable::default();
    // Ticket 0 is the empty stack, which is also stack 0.
    let mut ids = vec![StackId::EMPTY];
    let mut frames: Vec<FrameId> = Vec::with_capacity(256);
    for msg in rx {
        match msg {
            Msg::Batch(words) => {
                let mut i = 0;
                while i < words.len() {
                    let n = words[i] as usize;
                    frames.clear();
                    frames.extend(words[i + 1..i + 1 + n].iter().map(|&w| FrameId(w)));
                    ids.push(table.intern(&frames));
                    i += 1 + n;
                }
                held.store(
                    table.held_bytes() + ids.capacity() * size_of::<StackId>(),
                    Ordering::Relaxed,
                );
                let mut words = words;
                words.clear();
                let _ = spare.try_send(words);
            }
            Msg::Query(ticket, reply) => {
                let f = ids
                    .get(ticket as usize)
                    .map(|&s| table.get(s).to_vec())
                    .unwrap_or_default();
                let _ = reply.send(f);
            }
        }
    }
    (table, ids)
}

impl StackInterner {
    /// An interner; with `threaded` false it interns on the caller's thread.
    pub fn new(threaded: bool) -> Self {
        if !threaded {
            let (_, spare) = sync_channel(1);
            return StackInterner {
                inline: Some((StackTable::default(), vec![StackId::EMPTY])),
                tx: None,
                spare,
                worker: None,
                buf: Vec::new(),
                next_ticket: 1,
                answered: Default::default(),
                answered_bytes: 0,
                worker_held: Default::default(),
            };
        }
        let (tx, rx) = sync_channel(IN_FLIGHT);
        let (spare_tx, spare_rx) = sync_channel(IN_FLIGHT + 2);
        let worker_held = Arc::new(AtomicUsize::new(0));
        let held = worker_held.clone();
        let worker = std::thread::Builder::new()
            .name("leakscope-stacks".into())
            .spawn(move || work(rx, spare_tx, held))
            .ok();
        StackInterner {
            inline: None,
            tx: worker.as_ref().map(|_| tx),
            spare: spare_rx,
            worker,
            buf: Vec::with_capacity(BATCH_WORDS),
            next_ticket: 1,
            answered: Default::default(),
            answered_bytes: 0,
            worker_held,
        }
    }

    /// Bytes held by the interned stacks, the batches in flight and the answers kept.
    pub fn held_bytes(&self) -> usize {
        let table = match &self.inline {
            Some((table, ids)) => table.held_bytes() + ids.capacity() * size_of::<StackId>(),
            None => {
                self.worker_held.load(Ordering::Relaxed)
                    + (IN_FLIGHT + 2) * BATCH_WORDS * size_of::<u32>()
            }
        };
        table + self.buf.capacity() * size_of::<u32>() + self.answered_bytes
    }

    fn send(&mut self, msg: Msg) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(msg);
        }
    }

    fn flush(&mut self) {
        if !self.buf.is_empty() {
            let next = self
                .spare
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(BATCH_WORDS));
            let batch = std::mem::replace(&mut self.buf, next);
            self.send(Msg::Batch(batch));
        }
    }

    /// A ticket for the stack made of `frames`.
    #[inline]
    pub fn intern(&mut self, frames: &[FrameId]) -> StackId {
        if frames.is_empty() {
            return StackId::EMPTY;
        }
        if let Some((table, ids)) = &mut self.inline {
            ids.push(table.intern(frames));
            return StackId((ids.len() - 1) as u32);
        }
        let t = self.next_ticket;
        self.next_ticket += 1;
        // Send the batch before it would outgrow its buffer: a reallocation would copy it.
        if self.buf.len() + 1 + frames.len() > self.buf.capacity() {
            self.flush();
        }
        self.buf.push(frames.len() as u32);
        self.buf.extend(frames.iter().map(|f| f.0));
        StackId(t)
    }

    /// The frames behind a ticket (waits for the worker; rare: only for values kept as data).
    pub fn frames(&mut self, ticket: StackId) -> Vec<FrameId> {
        if ticket == StackId::EMPTY {
            return Vec::new();
        }
        if let Some((table, ids)) = &self.inline {
            return ids
                .get(ticket.index())
                .map(|&s| table.get(s).to_vec())
                .unwrap_or_default();
        }
        if let Some(f) = self.answered.get(&ticket.0) {
            return f.clone();
        }
        self.flush();
        let (reply_tx, reply_rx) = sync_channel(1);
        self.send(Msg::Query(ticket.0, reply_tx));
        let f: Vec<FrameId> = reply_rx.recv().unwrap_or_default();
        self.answered_bytes += f.len() * size_of::<FrameId>() + 48;
        self.answered.insert(ticket.0, f.clone());
        f
    }

    /// Ends the worker: the interned table, and the id of every ticket.
    pub fn finish(mut self) -> (StackTable, Vec<StackId>) {
        if let Some(done) = self.inline.take() {
            return done;
        }
        self.flush();
        self.tx = None; // closes the channel
        self.worker
            .take()
            .and_then(|w| w.join().ok())
            .unwrap_or_else(|| (StackTable::default(), vec![StackId::EMPTY]))
    }
}
