//! Id newtypes: small integers into the model's tables, so records stay compact and
//! cannot be confused with one another.

use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u32);

        impl $name {
            /// The id as an index into its table.
            #[inline]
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id_type!(
    /// An interned string in [`crate::model::Strings`].
    StrId
);
id_type!(
    /// An interned frame in [`crate::model::FrameTable`].
    FrameId
);
id_type!(
    /// An interned stack (list of frames, innermost first) in [`crate::model::StackTable`].
    StackId
);
id_type!(
    /// An interned set of per-event attributes that rarely change (stream, compile context,
    /// user metadata, pool id, which keys were present) in [`crate::model::Snapshot::metas`].
    MetaId
);

impl StackId {
    /// The empty stack (`frames: []`) always has id 0.
    pub const EMPTY: StackId = StackId(0);
}
