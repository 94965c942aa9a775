//! One reply per command, against scripted fake peers (feature `testing`): a peer that answers
//! one command with two replies never has its second reply read as the next command's; the
//! command that finds it is refused and the connection drops itself, so the next call is an
//! error (or, for a client that reconnects, a fresh connection). An honest peer is answered in
//! step, command after command.

use std::io::ErrorKind;
use std::time::Duration;

use redis_wire::testing::{Answer, spawn_answers};
use redis_wire::{Connection, Limits, Target, Value, WireError};

fn connect(port: u16) -> Connection {
    let target = Target::parse(&format!("redis://127.0.0.1:{port}/0")).expect("url");
    Connection::connect(
        &target,
        Duration::from_secs(2),
        Duration::from_secs(5),
        Limits::default(),
    )
    .expect("connect")
}

fn status(s: &str) -> Value {
    Value::SimpleString(s.to_owned())
}

/// Whether a call's answer is the stale second reply.
fn is_stale(answer: &Result<Value, WireError>) -> bool {
    matches!(answer, Ok(Value::SimpleString(s)) if s == "STALE")
        || matches!(answer, Err(WireError::Server(s)) if s.contains("STALE"))
}

#[test]
fn two_replies_in_one_write_refuse_the_command_and_drop_the_connection() {
    for (first, stale) in [
        (b"+FIRST\r\n".as_slice(), b"+STALE\r\n".as_slice()),
        (b"-ERR FIRST\r\n", b"+STALE\r\n"),
        (b"$5\r\nFIRST\r\n", b"-ERR STALE\r\n"),
    ] {
        let port = spawn_answers(vec![
            Answer::now(&[first, stale].concat()),
            Answer::now(b"+SECOND\r\n"),
        ]);
        let mut c = connect(port);
        let answer = c.query(&[b"GET", b"k"]);
        assert!(
            matches!(&answer, Err(WireError::Protocol(m)) if m.contains("more than one reply")),
            "{answer:?}"
        );
        assert!(c.is_dropped());
        for _ in 0..2 {
            let next = c.query(&[b"GET", b"k"]);
            assert!(!is_stale(&next), "{next:?}");
            assert!(
                matches!(
                    &next,
                    Err(WireError::Io {
                        kind: ErrorKind::NotConnected,
                        ..
                    })
                ),
                "{next:?}"
            );
        }
        // A fresh connection starts in step (the peer's script starts again too).
        let mut fresh = connect(port);
        assert!(fresh.query(&[b"GET", b"k"]).is_err());
    }
}

#[test]
fn a_second_reply_arriving_after_the_first_was_read_refuses_the_next_command() {
    let port = spawn_answers(vec![
        Answer::now(b"+FIRST\r\n").then_after(Duration::from_millis(20), b"+STALE\r\n"),
        Answer::now(b"+SECOND\r\n"),
    ]);
    let mut c = connect(port);
    // The second reply usually arrives after the first was checked; on a loaded machine it may
    // already be there: either way the first command never reads it.
    let first = c.query(&[b"GET", b"k"]);
    assert!(
        matches!(&first, Ok(v) if *v == status("FIRST"))
            || matches!(first, Err(WireError::Protocol(_))),
        "{first:?}"
    );
    // Let the late reply arrive (20 ms after the first, well within this wait).
    std::thread::sleep(Duration::from_millis(500));
    let next = c.query(&[b"GET", b"k"]);
    assert!(!is_stale(&next), "{next:?}");
    assert!(
        matches!(
            &next,
            Err(WireError::Protocol(_)) | Err(WireError::Io { .. })
        ),
        "{next:?}"
    );
    assert!(c.is_dropped());
    let after = c.query(&[b"GET", b"k"]);
    assert!(!is_stale(&after) && after.is_err(), "{after:?}");
}

#[test]
fn an_honest_peer_is_answered_in_step_and_a_close_after_a_reply_drops_the_connection() {
    let port = spawn_answers(vec![
        Answer::now(b"+A\r\n"),
        Answer::now(b":7\r\n"),
        Answer::now(b"-ERR nope\r\n"),
        Answer::now(b"*2\r\n$1\r\nx\r\n$-1\r\n"),
    ]);
    let mut c = connect(port);
    assert_eq!(c.query(&[b"PING"]).expect("A"), status("A"));
    assert_eq!(c.query(&[b"PING"]).expect("7"), Value::Int(7));
    // A server error leaves the stream in step: the connection stays.
    assert!(matches!(c.query(&[b"PING"]), Err(WireError::Server(e)) if e == "ERR nope"));
    assert!(!c.is_dropped());
    assert_eq!(
        c.query(&[b"PING"]).expect("array"),
        Value::Array(vec![Value::BulkString(b"x".to_vec()), Value::Nil])
    );
    // The script is over: the peer closes. The next command is an error, never a hang.
    let gone = c.query(&[b"PING"]);
    assert!(matches!(gone, Err(WireError::Io { .. })), "{gone:?}");
    assert!(c.is_dropped());
}
