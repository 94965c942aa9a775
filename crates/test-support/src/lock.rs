//! Another process holding a cache directory's lock: `flock(1)` holds it (`-o`: the lock is
//! flock's own, its command does not inherit it) in a process group of its own, so the test
//! can stop it (`SIGSTOP`: a holder that never lets go) and kill it whole.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use rustix::process::{Pid, Signal, kill_process_group};

/// A child process holding a lock file, killed (its whole group) and reaped on drop.
#[derive(Debug)]
pub struct LockHolder {
    child: Option<Child>,
    group: Pid,
}

impl LockHolder {
    /// Starts `flock` holding `dir/lock_file` (exclusively, or shared) and returns once it
    /// holds it. Panics when `flock(1)` cannot be started or does not take the lock.
    pub fn hold(dir: &Path, lock_file: &str, exclusive: bool) -> LockHolder {
        use std::os::unix::process::CommandExt;
        let mode = if exclusive { "--exclusive" } else { "--shared" };
        let mut child = Command::new("flock")
            .args([
                mode,
                "-o",
                lock_file,
                "sh",
                "-c",
                "echo held; exec sleep 600",
            ])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("flock(1)");
        let group = Pid::from_raw(i32::try_from(child.id()).expect("a pid")).expect("a pid");
        let stdout = child.stdout.take().expect("flock's stdout");
        let holder = LockHolder {
            child: Some(child),
            group,
        };
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read flock's output");
        assert_eq!(line.trim(), "held", "flock did not take {lock_file}");
        holder
    }

    /// Stops the holder (`SIGSTOP` to its group): it keeps the lock and never lets go.
    pub fn stop(&self) {
        kill_process_group(self.group, Signal::STOP).expect("SIGSTOP");
    }

    /// Kills the holder's group and reaps it: the lock is free after this returns.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill_process_group(self.group, Signal::KILL);
            let _ = child.wait();
        }
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    /// While held exclusively the lock is not free to this process; once killed it is.
    #[test]
    fn the_lock_is_held_until_the_holder_is_killed() {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("x.lock");
        File::create(&path).expect("create");
        let mut holder = LockHolder::hold(tmp.path(), "x.lock", true);
        holder.stop();
        let f = File::open(&path).expect("open");
        assert!(f.try_lock().is_err(), "held by the stopped holder");
        holder.kill();
        assert!(f.try_lock().is_ok(), "free after the kill");
    }
}
