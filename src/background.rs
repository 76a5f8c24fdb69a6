//! The background loops of a running server — the scheduler and the delivery pool — started
//! and stopped together.

use crate::app::App;
use std::sync::Arc;

/// Handles to the running background loops.
pub struct Background {
    scheduler: crate::scheduler::Scheduler,
    delivery: crate::delivery::DeliveryPool,
}

impl Background {
    pub fn start(app: Arc<App>) -> Self {
        Background {
            scheduler: crate::scheduler::Scheduler::start(app.clone()),
            delivery: crate::delivery::DeliveryPool::start(app),
        }
    }

    /// Stops firing schedules, then lets in-flight deliveries finish within the shutdown grace.
    /// Blocking.
    pub fn stop(self) {
        self.scheduler.stop();
        self.delivery.stop();
    }
}
