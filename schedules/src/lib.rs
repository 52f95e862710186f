//! tensorlift-schedules: operator definitions and their schedules.
