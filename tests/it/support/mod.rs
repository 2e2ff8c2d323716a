//! Every helper the test modules share, one file or folder per kind:
//!
//! - [`server`]: the real binary as a fixture (the test kit's
//!   `spawn_serve`), a blocking client with conditions to wait on, and a
//!   webhook receiver;
//! - [`engine`] and [`reference`]: a driver of the window engine with a
//!   readable changelog, and its reference model;
//! - [`patterns`] and [`patterns_reference`]: the same for the pattern
//!   engine;
//! - [`chaos`]: the chaos suite's runner and its batch oracle.

pub mod chaos;
pub mod engine;
pub mod patterns;
pub mod patterns_reference;
pub mod reference;
pub mod server;
