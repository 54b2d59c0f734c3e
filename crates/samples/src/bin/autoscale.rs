//! `autoscale`: spends time, CPU and memory as the query asks (Knative's autoscale-go):
//! `?sleep=MS` sleeps, `?prime=N` finds the largest prime ≤ N, `?bloat=MB` allocates and
//! touches MB mebibytes. Parameters combine and run in parallel.

use std::time::Duration;

use wisp_samples::{int_param, largest_prime, text};

/// Refuse allocations that would take the machine down with the sample.
const MAX_BLOAT_MB: u64 = 4096;

fn main() {
    wisp_samples::main_with(|req| async move {
        let query = req.uri().query().unwrap_or("").to_string();
        let parsed = (|| {
            Ok::<_, String>((
                int_param(&query, "sleep")?,
                int_param(&query, "prime")?,
                int_param(&query, "bloat")?,
            ))
        })();
        let (sleep, prime, bloat) = match parsed {
            Ok(p) => p,
            Err(e) => return text(400, format!("{e}\n")),
        };
        if bloat.is_some_and(|mb| mb > MAX_BLOAT_MB) {
            return text(400, format!("bloat is limited to {MAX_BLOAT_MB} MB\n"));
        }
        let sleep_task = async move {
            let ms = sleep?;
            let start = tokio::time::Instant::now();
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Some(format!(
                "Slept for {:.2} milliseconds.\n",
                start.elapsed().as_secs_f64() * 1e3
            ))
        };
        let prime_task = async move {
            let max = prime?;
            let p = tokio::task::spawn_blocking(move || largest_prime(max))
                .await
                .ok()?;
            Some(format!("The largest prime less than {max} is {p}.\n"))
        };
        let bloat_task = async move {
            let mb = bloat?;
            let held = tokio::task::spawn_blocking(move || {
                // Touch every page so the memory is really resident.
                let v = vec![1u8; (mb as usize) << 20];
                v.iter().step_by(4096).map(|&b| b as u64).sum::<u64>()
            })
            .await
            .ok()?;
            let _ = held;
            Some(format!("Allocated {mb} Mb of memory.\n"))
        };
        let (a, b, c) = tokio::join!(sleep_task, prime_task, bloat_task);
        let body: String = [a, b, c].into_iter().flatten().collect();
        text(200, body)
    });
}
