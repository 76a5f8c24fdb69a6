//! Fires due schedules into tasks (filled in by the schedules work).

use crate::app::App;
use std::sync::Arc;

/// The running scheduler loop.
pub struct Scheduler;

impl Scheduler {
    pub fn start(_app: Arc<App>) -> Self {
        Scheduler
    }

    pub fn stop(self) {}
}
