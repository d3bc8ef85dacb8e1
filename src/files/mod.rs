//! Files the tool writes: each appears whole or not at all ([`WholeFile`],
//! [`WholeDir`]), never over a file it read ([`Inputs`]) nor over a device, FIFO or
//! link it does not own ([`target`]), and two outputs of one command never at one path
//! ([`check_distinct`]); temporaries are removed on every error path and, where the
//! program asks, on SIGINT and SIGTERM ([`remove_temporaries_on_signals`]). The small
//! files options name are read with a limit ([`read_small_text`]). Every writer in the
//! library and the front ends goes through here, so the guarantee is kept in one place.
//!
//! ```
//! use leakscope::files::{Inputs, WholeFile};
//! use std::io::Write;
//!
//! let dir = std::env::temp_dir().join(format!("leakscope-files-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let input = dir.join("run.pickle");
//! std::fs::write(&input, b"snapshot")?;
//! let mut inputs = Inputs::default();
//! inputs.add(&input);
//! // An output named like the input is refused before anything is written.
//! assert!(inputs.check_output(&dir.join("./run.pickle")).is_err());
//! let out = dir.join("report.html");
//! inputs.check_output(&out)?;
//! let mut f = WholeFile::create(&out)?;
//! f.write_all(b"<html>")?;
//! f.commit()?; // only now does report.html exist
//! assert_eq!(std::fs::read(&out)?, b"<html>");
//! assert_eq!(std::fs::read(&input)?, b"snapshot");
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod identity;
mod small;
pub mod target;
mod temporary;
mod whole;

pub use identity::{Inputs, OutputError, check_distinct};
pub use small::{MAX_SMALL_TEXT_BYTES, SmallTextError, read_small_text};
pub use temporary::{TEMPORARY_PREFIX, remove_temporaries_on_signals};
pub use whole::{WholeDir, WholeFile, write_whole};
