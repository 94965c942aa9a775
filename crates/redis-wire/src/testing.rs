//! Fake peers on 127.0.0.1 for the clients' tests (cargo feature `testing`). A hostile one
//! ([`spawn`]) accepts connections on an ephemeral port, reads whatever the client sends, and
//! answers with one of the [`Hostile`] behaviours, for as long as the client stays connected;
//! a scripted one ([`spawn_answers`]) answers each command with given bytes (two replies to
//! one command, say).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

/// What the fake peer answers to every command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hostile {
    /// A 4 GB bulk length, then zeros streamed as fast as the client reads them.
    HugeBulk,
    /// A two-billion-element array, then integers streamed as fast as the client reads them.
    HugeArray,
    /// An array of 4096 bulk strings of 8 MiB each (each within a 16 MiB value cap, 32 GiB in
    /// all), streamed as fast as the client reads them.
    ManyBulks,
    /// `*1` nested a million deep.
    DeepNesting,
    /// A status line that never ends, streamed fast.
    EndlessLine,
    /// A status line that never ends, one byte every 50 ms.
    Trickle,
    /// Nothing at all (the connection stays open).
    Silence,
}

impl Hostile {
    /// Every behaviour.
    pub const ALL: [Hostile; 7] = [
        Hostile::HugeBulk,
        Hostile::HugeArray,
        Hostile::ManyBulks,
        Hostile::DeepNesting,
        Hostile::EndlessLine,
        Hostile::Trickle,
        Hostile::Silence,
    ];

    /// Its name, as used on command lines.
    pub fn name(self) -> &'static str {
        match self {
            Hostile::HugeBulk => "huge-bulk",
            Hostile::HugeArray => "huge-array",
            Hostile::ManyBulks => "many-bulks",
            Hostile::DeepNesting => "deep-nesting",
            Hostile::EndlessLine => "endless-line",
            Hostile::Trickle => "trickle",
            Hostile::Silence => "silence",
        }
    }

    /// The behaviour named `name`.
    pub fn from_name(name: &str) -> Option<Hostile> {
        Hostile::ALL.into_iter().find(|h| h.name() == name)
    }
}

/// Starts the peer on a thread; returns its port. The thread lives as long as the process.
pub fn spawn(behaviour: Hostile) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    let port = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("local_addr: {e}"))
        .port();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || serve(stream, behaviour));
        }
    });
    port
}

/// Streams `chunk` until the client goes away, or at most `limit` bytes in all.
fn stream_forever(s: &mut TcpStream, chunk: &[u8], limit: u64) {
    let mut sent = 0u64;
    while sent < limit && s.write_all(chunk).is_ok() {
        sent += chunk.len() as u64;
    }
}

fn serve(mut s: TcpStream, behaviour: Hostile) {
    let mut buf = [0u8; 64 << 10];
    // Wait for the first command's bytes (whatever they are).
    if !matches!(s.read(&mut buf), Ok(n) if n > 0) {
        return;
    }
    const LIMIT: u64 = 8 << 30;
    match behaviour {
        Hostile::HugeBulk => {
            if s.write_all(b"$4000000000\r\n").is_ok() {
                stream_forever(&mut s, &[0u8; 64 << 10], LIMIT);
            }
        }
        Hostile::HugeArray => {
            if s.write_all(b"*2000000000\r\n").is_ok() {
                stream_forever(&mut s, &b":1\r\n".repeat(16 << 10), LIMIT);
            }
        }
        Hostile::ManyBulks => {
            let body = [b"$8388608\r\n".as_slice(), &vec![0u8; 8 << 20], b"\r\n"].concat();
            if s.write_all(b"*4096\r\n").is_ok() {
                for _ in 0..4096 {
                    if s.write_all(&body).is_err() {
                        break;
                    }
                }
            }
        }
        Hostile::DeepNesting => {
            let _ = s.write_all(&b"*1\r\n".repeat(1_000_000));
        }
        Hostile::EndlessLine => {
            if s.write_all(b"+").is_ok() {
                stream_forever(&mut s, &[b'a'; 64 << 10], LIMIT);
            }
        }
        Hostile::Trickle => {
            for b in std::iter::once(b'+').chain(std::iter::repeat(b'a')) {
                if s.write_all(&[b]).is_err() {
                    break;
                }
                thread::sleep(Duration::from_millis(50));
            }
        }
        Hostile::Silence => {
            // Hold the connection open; read (and drop) whatever comes until the client closes.
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
    }
}

/// What a [`spawn_answers`] peer writes for one command: `now` as soon as the command's bytes
/// arrived, then, if `later` is given, its bytes after its pause (before reading the next
/// command).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Written at once.
    pub now: Vec<u8>,
    /// Written after the pause.
    pub later: Option<(Duration, Vec<u8>)>,
}

impl Answer {
    /// `bytes` at once, nothing later.
    pub fn now(bytes: &[u8]) -> Answer {
        Answer {
            now: bytes.to_vec(),
            later: None,
        }
    }

    /// This answer, then `bytes` after `pause`.
    pub fn then_after(mut self, pause: Duration, bytes: &[u8]) -> Answer {
        self.later = Some((pause, bytes.to_vec()));
        self
    }
}

/// Starts a peer that answers the n-th command of each connection with `answers[n]` (each
/// connection from the first answer; past the last it closes the connection), counting each
/// read of the client's bytes as one command; returns its port. The thread lives as long as
/// the process.
pub fn spawn_answers(answers: Vec<Answer>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    let port = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("local_addr: {e}"))
        .port();
    thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let answers = answers.clone();
            thread::spawn(move || {
                let mut buf = [0u8; 64 << 10];
                for answer in answers {
                    if !matches!(stream.read(&mut buf), Ok(n) if n > 0)
                        || stream.write_all(&answer.now).is_err()
                    {
                        return;
                    }
                    if let Some((pause, bytes)) = answer.later {
                        thread::sleep(pause);
                        if stream.write_all(&bytes).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    port
}

/// The peak resident memory of this process (`VmHWM` of `/proc/self/status`), in KiB.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
