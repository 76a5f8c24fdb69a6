//! The blocking delivery worker pool (filled in by the delivery work).

use crate::app::App;
use std::sync::Arc;

/// The running delivery pool.
pub struct DeliveryPool;

impl DeliveryPool {
    pub fn start(_app: Arc<App>) -> Self {
        DeliveryPool
    }

    pub fn stop(self) {}
}
