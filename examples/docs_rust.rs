//! The Rust examples of README.md and docs/rust.md (blocking and async
//! clients). `scripts/check-docs.sh` checks that each guide's code block
//! equals its `// [docs:NAME]` region here; `cargo build --features native
//! --examples` compiles them. Running it needs etcd on 127.0.0.1:2379.

#[cfg(not(feature = "native"))]
fn main() {
    eprintln!("build with --features native");
}

#[cfg(feature = "native")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    blocking::run()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(asynchronous::run())
}

/// What the examples protect: a resource that rejects lower fencing tokens.
#[cfg(feature = "native")]
fn write_report(token: u64) -> Result<(), Box<dyn std::error::Error>> {
    println!("report written with fencing token {token}");
    Ok(())
}

#[cfg(feature = "native")]
mod blocking {
    use std::error::Error;

    use crate::write_report;

    pub fn run() -> Result<(), Box<dyn Error>> {
        // [docs:quickstart]
        use edgelock::native::{Client, EtcdConfig};
        use std::time::Duration;

        let client = Client::etcd(EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]))?;
        let lock = client.acquire("nightly-report", Some(Duration::from_secs(30)))?; // wait up to 30 s
        write_report(lock.fencing_token())?; // the resource rejects lower tokens
        if lock.is_lost() { /* stop: someone else may hold it now */ }
        lock.release()?; // deletes exactly this holder's key

        if let Some(lock) = client.try_acquire("nightly-report")? {
            /* got it without waiting */
            lock.release()?;
        }
        // [/docs:quickstart]
        Ok(())
    }
}

#[cfg(feature = "native")]
mod asynchronous {
    use std::error::Error;

    async fn write_report(token: u64) -> Result<(), Box<dyn Error>> {
        crate::write_report(token)
    }

    pub async fn run() -> Result<(), Box<dyn Error>> {
        // [docs:async]
        use edgelock::native::{AsyncClient, EtcdConfig};
        use std::time::Duration;

        let client = AsyncClient::etcd(EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]))?;
        let lock = client
            .acquire("nightly-report", Some(Duration::from_secs(30)))
            .await?;
        tokio::select! {                               // any executor's select or race works
            r = write_report(lock.fencing_token()) => r?,
            reason = lock.lost() => return Err(format!("lock lost: {reason:?}").into()),
        }
        lock.release().await?;

        // Cancelling is dropping: the acquire is aborted on the backend, and a grant
        // that raced the drop is released; nothing stays held.
        let bounded = tokio::time::timeout(
            Duration::from_secs(5),
            client.acquire("nightly-report", None),
        )
        .await;
        // [/docs:async]
        drop(bounded);
        Ok(())
    }
}
