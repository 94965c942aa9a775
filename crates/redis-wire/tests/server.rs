//! The client against a real `redis-server` on 127.0.0.1 (and on a Unix socket): database
//! selection, ACL logins, scripts by `EVALSHA` with the `EVAL` fallback, every byte value through
//! a bulk string, and a real reply past a limit refused. Without a `redis-server` binary the test
//! fails, saying so (`cargo xtask test` installs it when it may).

use std::time::Duration;

use redis_wire::{Connection, Limits, Script, Target, Value, WireError};
use test_support::redis::RedisServer;

fn connect(url: &str, limits: Limits) -> Result<Connection, WireError> {
    Connection::connect(
        &Target::parse(url)?,
        Duration::from_millis(500),
        Duration::from_secs(2),
        limits,
    )
}

fn bulk(b: &[u8]) -> Value {
    Value::BulkString(b.to_vec())
}

#[test]
fn a_real_server_over_tcp_and_a_unix_socket() {
    let server = RedisServer::start();
    let tcp = |db: u32| format!("redis://127.0.0.1:{}/{db}", server.port());
    let every_byte: Vec<u8> = (0..=255u8).chain(b"\r\n\r\n".iter().copied()).collect();

    // Database selection: a value set in db 3 is not in db 0.
    let mut three = connect(&tcp(3), Limits::default()).expect("db 3");
    assert_eq!(
        three.query(&[b"SET", b"k", &every_byte]).expect("set"),
        Value::SimpleString("OK".into())
    );
    assert_eq!(
        three.query(&[b"GET", b"k"]).expect("get"),
        bulk(&every_byte)
    );
    let mut zero = connect(&tcp(0), Limits::default()).expect("db 0");
    assert_eq!(zero.query(&[b"GET", b"k"]).expect("get"), Value::Nil);
    // The same database through the Unix socket.
    let sock = server.socket();
    let mut unix = connect(
        &format!("unix://{}?db=3", sock.display()),
        Limits::default(),
    )
    .expect("unix");
    assert_eq!(unix.query(&[b"GET", b"k"]).expect("get"), bulk(&every_byte));

    // Arrays and integers as the server sends them.
    zero.query(&[b"RPUSH", b"l", b"a", b"", b"c"])
        .expect("rpush");
    assert_eq!(
        zero.query(&[b"LRANGE", b"l", b"0", b"-1"]).expect("lrange"),
        Value::Array(vec![bulk(b"a"), bulk(b""), bulk(b"c")])
    );
    assert_eq!(zero.query(&[b"LLEN", b"l"]).expect("llen"), Value::Int(3));
    // A server error is `Server`, and the connection stays usable.
    assert!(matches!(
        zero.query(&[b"NOSUCHCOMMAND"]),
        Err(WireError::Server(e)) if e.starts_with("ERR")
    ));

    // Scripts: the first call falls back to EVAL (NOSCRIPT), the next runs by EVALSHA.
    let script = Script::new("return {KEYS[1], ARGV[1], 7}");
    zero.query(&[b"SCRIPT", b"FLUSH"]).expect("flush");
    for _ in 0..2 {
        assert_eq!(
            zero.eval(&script, &[b"key"], &[b"arg"]).expect("eval"),
            Value::Array(vec![bulk(b"key"), bulk(b"arg"), Value::Int(7)])
        );
    }

    // ACL logins: the right password logs in as the user, a wrong one is refused.
    zero.query(&[b"ACL", b"SETUSER", b"u", b"on", b">pw", b"~*", b"+@all"])
        .expect("acl");
    let mut user = connect(
        &format!("redis://u:pw@127.0.0.1:{}/0", server.port()),
        Limits::default(),
    )
    .expect("login");
    assert_eq!(
        user.query(&[b"ACL", b"WHOAMI"]).expect("whoami"),
        bulk(b"u")
    );
    assert!(matches!(
        connect(
            &format!("redis://u:wrong@127.0.0.1:{}/0", server.port()),
            Limits::default()
        ),
        Err(WireError::Server(_))
    ));

    // A real value past the cap is refused unread.
    zero.query(&[b"SET", b"big", &vec![b'x'; 2 << 20]])
        .expect("set");
    let mut small = connect(&tcp(0), Limits::for_values_up_to(1 << 20)).expect("connect");
    assert!(matches!(
        small.query(&[b"GET", b"big"]),
        Err(WireError::Limit(_))
    ));
    // TLS is refused at parse time.
    assert!(matches!(
        Target::parse("rediss://127.0.0.1:1/0"),
        Err(WireError::Url(_))
    ));
}
