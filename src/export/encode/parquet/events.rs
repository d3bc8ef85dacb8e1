//! `events.parquet`: every trace event of every device, straight from the model's
//! columns. Addresses, sizes, times and stack ids are the columns themselves (copied
//! once); the action is a dictionary over the snapshot's action names keyed by the action
//! codes, and the stream comes from each event's interned attributes. The role is a
//! dictionary over the session's role names keyed by the role of the allocation each
//! event belongs to (null for events of no allocation, and for devices not analysed).

use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array,
    UInt64Array,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::columns::{FileKey, dict_field, file_column, file_field};
use super::table::{Table, TableError, batch};
use crate::model::{Action, Snapshot, Trace, flags};

/// The table's schema.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        file_field(),
        Field::new("device", DataType::Int64, false),
        Field::new("idx", DataType::UInt32, false),
        dict_field("action", false),
        Field::new("addr", DataType::UInt64, false),
        Field::new("size", DataType::UInt64, false),
        Field::new("time_us", DataType::Int64, true),
        Field::new("stream", DataType::Int64, false),
        Field::new("stack_id", DataType::UInt32, false),
        dict_field("role", true),
    ]))
}

/// The roles of one file's events: the role names (by role id) and, per device analysed,
/// the role id of each event's allocation ([`NO_ROLE`] for an event of none).
#[derive(Clone, Debug, Default)]
pub struct EventRoles {
    /// Role names, indexed by role id.
    pub names: Vec<String>,
    /// `(device, role id per event)`.
    pub devices: Vec<(i64, Vec<u8>)>,
}

/// An event of no allocation in [`EventRoles`].
pub const NO_ROLE: u8 = u8::MAX;

/// What every device's batch shares: the action names and each meta's time flag and
/// stream.
struct Shared {
    actions: ArrayRef,
    timed: Vec<bool>,
    all_timed: bool,
    streams: Vec<i64>,
}

impl Shared {
    fn of(snap: &Snapshot) -> Shared {
        let timed: Vec<bool> = snap.metas.iter().map(|m| m.has(flags::TIME)).collect();
        Shared {
            actions: Arc::new(StringArray::from_iter_values(
                (0..snap.actions.len()).map(|c| snap.actions.name(Action(c as u8))),
            )),
            all_timed: timed.iter().all(|t| *t),
            timed,
            streams: snap.metas.iter().map(|m| m.stream).collect(),
        }
    }
}

/// One batch per device with events, in device order (a device's whole trace in one
/// batch: the writer cuts row groups).
/// `roles`: the role of each event of the devices analysed (the others' roles are null).
pub fn batches_of(
    key: &FileKey,
    snap: &Snapshot,
    roles: &EventRoles,
) -> Result<Vec<RecordBatch>, TableError> {
    let shared = Shared::of(snap);
    let names: ArrayRef = Arc::new(StringArray::from_iter_values(
        roles.names.iter().map(String::as_str),
    ));
    snap.device_traces
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, t)| !t.is_empty())
        .map(|(d, t)| {
            let d = d as i64;
            let ids = roles
                .devices
                .iter()
                .find(|(x, _)| *x == d)
                .map(|(_, ids)| ids.as_slice());
            let role = role_column(t.len(), ids, &names)?;
            device_batch(key, d, t, &shared, role)
        })
        .collect()
}

/// The `role` column of a device's `n` events: keys into `names`, null for
/// [`NO_ROLE`] (and everywhere when the device has no roles).
fn role_column(n: usize, ids: Option<&[u8]>, names: &ArrayRef) -> Result<ArrayRef, TableError> {
    let keys: Int32Array = match ids {
        Some(ids) if ids.len() == n => ids
            .iter()
            .map(|&r| (r != NO_ROLE && (r as usize) < names.len()).then_some(i32::from(r)))
            .collect(),
        _ => Int32Array::new_null(n),
    };
    let dict = DictionaryArray::<Int32Type>::try_new(keys, Arc::clone(names))
        .map_err(|e| Table::Events.arrow_error(e))?;
    Ok(Arc::new(dict))
}

fn device_batch(
    key: &FileKey,
    device: i64,
    t: &Trace,
    shared: &Shared,
    role: ArrayRef,
) -> Result<RecordBatch, TableError> {
    let n = t.len();
    let codes: Vec<i32> = t.action.iter().map(|a| i32::from(a.0)).collect();
    let action =
        DictionaryArray::<Int32Type>::try_new(Int32Array::from(codes), Arc::clone(&shared.actions))
            .map_err(|e| Table::Events.arrow_error(e))?;
    let time_nulls = (!shared.all_timed).then(|| {
        t.meta
            .iter()
            .map(|m| shared.timed.get(m.index()).copied().unwrap_or(false))
            .collect::<NullBuffer>()
    });
    let streams: Vec<i64> = t
        .meta
        .iter()
        .map(|m| shared.streams.get(m.index()).copied().unwrap_or(0))
        .collect();
    let idx: Vec<u32> = (0..n as u32).collect();
    let stack: Vec<u32> = t.stack.iter().map(|s| s.0).collect();
    batch(
        Table::Events,
        schema(),
        vec![
            file_column(key.file, n),
            Arc::new(Int64Array::from(vec![device; n])),
            Arc::new(UInt32Array::from(idx)),
            Arc::new(action),
            Arc::new(UInt64Array::from(t.addr.clone())),
            Arc::new(UInt64Array::from(t.size.clone())),
            Arc::new(Int64Array::new(t.time_us.clone().into(), time_nulls)),
            Arc::new(Int64Array::from(streams)),
            Arc::new(UInt32Array::from(stack)),
            role,
        ],
    )
}
