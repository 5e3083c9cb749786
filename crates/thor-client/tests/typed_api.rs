//! The typed API's contract at its edges: `run` with the application's own error type, `Ref`
//! equality across the commit that gives a created object its oref, and `create_fixed`.

mod common;

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::Arc;

use thor_client::{ClientError, Ref, Session};
use thor_server::Engine;

thor_client::class! {
    /// An account with a balance.
    pub class Account("typed.Account") {
        balance: u64,
    }
}

thor_client::class! {
    /// A blob big enough to sit in a page of its own.
    pub class Blob("typed.Blob") {
        id: u32,
    }
    var bytes;
}

use common::engine;

fn session(h: &Arc<Engine>) -> Session {
    common::session_with(h, 4 << 20)
}

/// The application's error: its own refusal, or thor's.
#[derive(Debug)]
enum BankError {
    Insufficient { have: u64 },
    Db(ClientError),
}

impl From<ClientError> for BankError {
    fn from(e: ClientError) -> Self {
        BankError::Db(e)
    }
}

/// An account in root slot 0 holding `balance`.
fn account(s: &Session, balance: u64) {
    s.run(|s| {
        let a = s.create_fixed::<Account>()?;
        a.set(Account::balance, balance)?;
        s.set_root(0, a.as_ref())
    })
    .unwrap();
}

/// A closure that writes, then fails with the application's error: the error comes back as
/// itself, after one attempt, and the write is gone (the transaction aborted, not committed).
#[test]
fn run_with_an_application_error_aborts_and_returns_it() {
    let h = engine();
    let s = session(&h);
    account(&s, 100);
    let attempts = Cell::new(0);
    let withdraw = |amount: u64| {
        s.run(|s| {
            attempts.set(attempts.get() + 1);
            let a = s.get(s.root::<Account>(0)?)?;
            let have = a.get(Account::balance);
            a.set(Account::balance, have.wrapping_sub(amount))?;
            if have < amount {
                return Err(BankError::Insufficient { have });
            }
            Ok(have - amount)
        })
    };
    assert_eq!(withdraw(60).unwrap(), 40);
    attempts.set(0);
    match withdraw(60) {
        Err(BankError::Insufficient { have: 40 }) => {}
        other => panic!("expected the application's error, got {other:?}"),
    }
    assert_eq!(attempts.get(), 1, "an application error is not retried");
    // The write before the error was undone, here and at the server.
    let read = |s: &Session| {
        s.run(|s| Ok::<_, ClientError>(s.get(s.root::<Account>(0)?)?.get(Account::balance)))
            .unwrap()
    };
    assert_eq!(read(&s), 40);
    assert_eq!(read(&session(&h)), 40);
    // thor's own errors convert: a null root is `NullReference`, as `BankError::Db`.
    let err = s
        .run(|s| -> Result<(), BankError> {
            s.get(s.root::<Account>(1)?)?;
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(err, BankError::Db(ClientError::NullReference)), "{err:?}");
}

/// A conflict that a thor call inside the closure meets, and that `?` converts into the
/// application's error, still runs the closure again: the first attempt read an account that
/// another session changed, and the fetch that brought the invalidation failed with a
/// conflict; the second attempt sees the new balance and commits.
#[test]
fn a_conflict_converted_into_the_application_error_is_retried() {
    let h = engine();
    let a = session(&h);
    let b = session(&h);
    account(&a, 100);
    // A blob in a page of its own, that `a` has never read: reading it makes a round trip.
    b.run(|s| {
        let blob = s.create::<Blob>(7_000)?;
        s.set_root(1, blob.as_ref())
    })
    .unwrap();
    a.sync().unwrap(); // `a` hears of root slot 1
    let attempts = Cell::new(0);
    let got = a.run(|s| {
        attempts.set(attempts.get() + 1);
        let acc = s.get(s.root::<Account>(0)?)?;
        let have = acc.get(Account::balance);
        if attempts.get() == 1 {
            // Another client takes 30 meanwhile.
            b.run(|s| {
                let acc = s.get(s.root::<Account>(0)?)?;
                acc.set(Account::balance, acc.get(Account::balance) - 30)
            })
            .unwrap();
        }
        s.get(s.root::<Blob>(1)?)?; // a fetch: the invalidation arrives, the attempt is doomed
        if have < 80 {
            return Err(BankError::Insufficient { have });
        }
        acc.set(Account::balance, have - 80)?;
        Ok(have - 80)
    });
    assert!(
        matches!(got, Err(BankError::Insufficient { have: 70 })),
        "the second attempt sees the other client's write: {got:?}"
    );
    assert_eq!(attempts.get(), 2);
}

/// A reference made by the transaction that created an object equals (and hashes as) the
/// reference read from the root after the commit; different objects stay unequal, and a
/// reference to an object of an aborted transaction equals only itself.
#[test]
fn a_created_ref_equals_the_same_object_read_later() {
    let h = engine();
    let s = session(&h);
    let (created, other) = s
        .run(|s| {
            let a = s.create_fixed::<Account>()?;
            let b = s.create_fixed::<Account>()?;
            s.set_root(0, a.as_ref())?;
            s.set_root(1, b.as_ref())?;
            Ok::<_, ClientError>((a.as_ref(), b.as_ref()))
        })
        .unwrap();
    assert!(created.oref().is_none(), "made before the commit: {created:?}");
    let (read, read_other) =
        s.run(|s| Ok::<_, ClientError>((s.root::<Account>(0)?, s.root::<Account>(1)?))).unwrap();
    assert!(read.oref().is_some(), "read after the commit: {read:?}");
    assert_eq!(created, read, "{created:?} and {read:?} name one object");
    assert_eq!(read, created);
    assert_eq!(other, read_other);
    assert_ne!(created, read_other);
    assert_ne!(other, read);
    let set: HashSet<Ref<Account>> = [read, read_other].into_iter().collect();
    assert!(set.contains(&created) && set.contains(&other));
    assert_eq!(s.canonical(created).unwrap(), read);

    // Created by a transaction that aborts: it names nothing, and equals only itself.
    let gone = s.create_fixed::<Account>().unwrap().as_ref();
    s.abort();
    assert_eq!(gone, gone);
    assert_ne!(gone, read);
    // A later object created in this session equals its own later reads too.
    let again = s
        .run(|s| {
            let c = s.create_fixed::<Account>()?;
            s.set_root(2, c.as_ref())?;
            Ok::<_, ClientError>(c.as_ref())
        })
        .unwrap();
    let again_read = s.run(|s| s.root::<Account>(2)).unwrap();
    assert_eq!(again, again_read);
    assert_ne!(again, gone);
    assert_ne!(again, read);
}

/// A class without a variable part is made without a length; one with a variable part still
/// takes it, and `create_dyn` refuses a length for a fixed class at run time.
#[test]
fn a_fixed_class_is_created_without_a_length() {
    let h = engine();
    let s = session(&h);
    s.run(|s| {
        let a = s.create_fixed::<Account>()?;
        assert_eq!(a.get(Account::balance), 0);
        let b = s.create::<Blob>(3)?;
        assert_eq!(b.var_len(), 3);
        assert!(matches!(s.create_dyn::<Account>(1), Err(ClientError::Usage(_))));
        s.create_dyn::<Account>(0)?;
        Ok::<_, ClientError>(())
    })
    .unwrap();
}
