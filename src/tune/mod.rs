//! Auto-scheduling: a typed search space per layer (`space`), search strategies (`search`), and
//! the record database (`db`).

pub mod db;
pub mod search;
pub mod space;
