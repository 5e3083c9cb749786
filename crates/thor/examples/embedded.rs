//! A complete embedded program: a small bank kept in a thor database that this process runs.
//!
//! ```sh
//! cargo run -p thor --example embedded            # in a temporary directory
//! cargo run -p thor --example embedded -- bank.db # in bank.db: run it twice
//! ```
//!
//! It declares its classes, opens (or creates) the database, creates customers and accounts
//! and links them, commits, closes, opens the database again and reads everything back, then
//! runs transfers from four threads at once, each thread with its own session. Transfers that
//! conflict are retried by `Session::run`, and the bank's total never changes.

use std::path::Path;
use std::time::Instant;

use thor::{ClientError, Database, Ref, Refs, Session, SessionConfig};

thor::class! {
    /// A customer: the year they joined, and their name.
    pub class Customer("bank.Customer") { since: u32 }
    var bytes;
}

thor::class! {
    /// An account: its balance in cents and its owner.
    pub class Account("bank.Account") { balance: u64, owner: Ref<Customer> }
}

/// The bank's accounts live in a collection in this root slot.
const ACCOUNTS_SLOT: usize = 0;
/// Cents each new account starts with (100.00).
const OPENING_CENTS: u64 = 10_000;
/// Transfers each thread makes.
const TRANSFERS_PER_THREAD: u64 = 250;
/// Threads transferring at once.
const THREADS: u64 = 4;

fn main() -> Result<(), thor::Error> {
    match std::env::args_os().nth(1) {
        Some(path) => run(Path::new(&path)),
        None => {
            let tmp = tempfile::tempdir().expect("a temporary directory");
            run(&tmp.path().join("bank.db"))
        }
    }
}

/// The program, on the database in directory `path`.
pub fn run(path: &Path) -> Result<(), thor::Error> {
    // 1. Open, creating the database if it is not there. A session is a transaction
    //    context: the first access starts a transaction, commit ends it.
    let s = thor::open(path)?;
    println!("opened {}", path.display());
    if s.root::<Refs<Account>>(ACCOUNTS_SLOT)?.is_null() {
        create_bank(&s)?;
    } else {
        s.commit()?;
        println!("the bank is already there (from an earlier run)");
    }

    // 2. Close (dropping the last session closes the database cleanly) and open it again:
    //    everything committed is there.
    drop(s);
    let s = thor::open(path)?;
    let total = print_bank(&s)?;
    drop(s);

    // 3. Transfers from several threads, a session each, on one `Database`.
    let db = Database::open(path)?;
    let started = Instant::now();
    let db_ref = &db;
    let done: Vec<Result<u64, thor::Error>> = std::thread::scope(|scope| {
        let workers: Vec<_> =
            (0..THREADS).map(|t| scope.spawn(move || transfers(db_ref, t))).collect();
        workers.into_iter().map(|w| w.join().expect("a transfer thread panicked")).collect()
    });
    let mut retries = 0;
    for d in done {
        retries += d?;
    }
    println!(
        "{} transfers from {THREADS} threads in {:.0} ms; {retries} attempts conflicted and \
         `run` ran them again",
        THREADS * TRANSFERS_PER_THREAD,
        started.elapsed().as_secs_f64() * 1e3,
    );
    let s = db.session()?;
    let after = print_bank(&s)?;
    assert_eq!(after, total, "transfers keep the total");
    drop(s);
    db.close()?;
    println!("closed: the next open replays nothing");
    Ok(())
}

/// One transaction: three customers, an account each, and the collection of accounts in the
/// root.
fn create_bank(s: &Session) -> Result<(), thor::Error> {
    let customers = [("Ada", 1843), ("Barbara", 1968), ("Edsger", 1959)];
    let accounts = s.create::<Refs<Account>>(customers.len())?;
    for (i, (name, since)) in customers.iter().enumerate() {
        let customer = s.create::<Customer>(name.len())?;
        customer.set(Customer::since, *since)?;
        customer.set_var_bytes(name.as_bytes())?;
        let account = s.create_fixed::<Account>()?;
        account.set(Account::balance, OPENING_CENTS)?;
        account.set(Account::owner, customer.as_ref())?;
        accounts.set_var_ref(i, account.as_ref())?;
    }
    s.set_root(ACCOUNTS_SLOT, accounts.as_ref())?;
    drop(accounts);
    let info = s.commit()?;
    println!(
        "created {} objects, the bank's and its classes', in one transaction (commit at LSN {})",
        info.created, info.lsn
    );
    Ok(())
}

/// Prints every account with its owner, in one (read-only) transaction; returns the total.
fn print_bank(s: &Session) -> Result<u64, thor::Error> {
    let rows = s.run::<_, thor::ClientError>(|s| {
        let accounts = s.get(s.root::<Refs<Account>>(ACCOUNTS_SLOT)?)?;
        let mut rows = Vec::new();
        for i in 0..accounts.var_len() {
            let account = s.get(accounts.var_ref(i))?;
            let owner = s.get(account.get(Account::owner))?;
            let name = String::from_utf8_lossy(&owner.var_bytes()).into_owned();
            rows.push((name, owner.get(Customer::since), account.get(Account::balance)));
        }
        Ok(rows)
    })?;
    let mut total = 0;
    for (name, since, cents) in rows {
        println!("  {name:<8} (since {since}): {:>4}.{:02}", cents / 100, cents % 100);
        total += cents;
    }
    println!("  total:            {:>4}.{:02}", total / 100, total % 100);
    Ok(total)
}

/// Thread `t`'s transfers between random accounts; returns how many attempts `run` made again
/// after a conflict.
fn transfers(db: &Database, t: u64) -> Result<u64, thor::Error> {
    // Few accounts and four threads: transfers conflict often, so let `run` try for longer
    // than its default ten attempts.
    let s = db.session_with(SessionConfig { run_attempts_max: 100, ..SessionConfig::default() })?;
    let mut rng = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in 0..TRANSFERS_PER_THREAD {
        let (from, to, cents) = (next(&mut rng), next(&mut rng), 1 + next(&mut rng) % 500);
        s.run(|s| transfer(s, from, to, cents))?;
    }
    Ok(s.stats().retries)
}

/// Moves `cents` from account `from` to account `to` (indexes, taken modulo the number of
/// accounts) if `from` has them. The whole transaction: `run` may call it more than once.
fn transfer(s: &Session, from: u64, to: u64, cents: u64) -> Result<(), ClientError> {
    let accounts = s.get(s.root::<Refs<Account>>(ACCOUNTS_SLOT)?)?;
    let n = accounts.var_len() as u64;
    let (from, to) =
        (s.get(accounts.var_ref((from % n) as usize))?, accounts.var_ref((to % n) as usize));
    if from.as_ref() == to || from.get(Account::balance) < cents {
        return Ok(());
    }
    let to = s.get(to)?;
    from.set(Account::balance, from.get(Account::balance) - cents)?;
    to.set(Account::balance, to.get(Account::balance) + cents)
}

/// A xorshift step: the example's random numbers.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}
