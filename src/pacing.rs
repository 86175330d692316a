//! Pacing for calls made once per object (a Kubernetes request, an EC2 call per node): a token
//! bucket as client-go's, so a thousand objects arriving at once become a steady stream the
//! remote API's own throttling never sees as a burst.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// A token bucket that hands out reservations: a request that finds the bucket empty waits
/// until its token will have been refilled, and later requests queue behind it, so requests are
/// delayed in arrival order and the long-run rate never exceeds `qps`.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    /// Tokens available now; negative when reservations are queued.
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at `qps` per second. Both are at least 1 (the
    /// settings reject 0).
    pub fn new(qps: u32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: f64::from(qps.max(1)),
            burst,
            state: Mutex::new(BucketState {
                tokens: burst,
                last: now,
            }),
        }
    }

    /// Takes one token at `now` and returns how long the caller must wait before using it.
    pub fn reserve(&self, now: Instant) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now.saturating_duration_since(state.last).as_secs_f64();
        state.tokens = (state.tokens + elapsed * self.qps).min(self.burst);
        state.last = state.last.max(now);
        state.tokens -= 1.0;
        if state.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-state.tokens / self.qps)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_serves_the_burst_then_qps() {
        let start = Instant::now();
        let bucket = TokenBucket::new(10, 3, start);
        for _ in 0..3 {
            assert_eq!(bucket.reserve(start), Duration::ZERO);
        }
        // The fourth and fifth wait 0.1 s and 0.2 s: reservations queue.
        assert_eq!(bucket.reserve(start), Duration::from_millis(100));
        assert_eq!(bucket.reserve(start), Duration::from_millis(200));
        // After a second the bucket is full again (3), not 10 - 2.
        let later = start + Duration::from_millis(1200);
        for _ in 0..3 {
            assert_eq!(bucket.reserve(later), Duration::ZERO);
        }
        assert_eq!(bucket.reserve(later), Duration::from_millis(100));
    }
}
