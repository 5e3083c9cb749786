//! thor's client cache managers (HAC, FPC later) and the page replacement policies they and the
//! server's page cache are built on. No I/O: everything here is a pure data structure driven by
//! its caller, so simulators (`thor-cachesim`, the OO7 experiments) run exactly the code that
//! ships.

pub mod policy;
