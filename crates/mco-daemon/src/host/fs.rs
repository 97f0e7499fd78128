//! Host files, every access confined to one root directory.
//!
//! On a real host the root is `/` (or the host mount inside the daemon's container); in
//! simulation it is the node's directory. All paths given to this module are host-absolute
//! (`/etc/motd`) and are resolved beneath the root through a `cap_std::fs::Dir`, so nothing can
//! escape it, not even through a symlink planted on the node.
//!
//! Every write replaces its target whole in one rename. A real host writes a temp file, fsyncs
//! it, renames it over the target and fsyncs the directory ([`Durability::PowerLoss`]). A
//! simulated node does not fsync ([`Durability::ProcessCrash`]: its reboot stops the daemon,
//! not a kernel, so the page cache keeps every completed write), and it writes into a swap file
//! kept per target under the root's [`SWAP_DIR`], which trades places with the target
//! (`renameat2(RENAME_EXCHANGE)`): the old inode becomes the next write's swap file, so a
//! thousand simulated nodes do not allocate an inode per write.

use std::io::{self, Write};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, Metadata, MetadataExt, Permissions, PermissionsExt};
use cap_std_ext::dirext::CapStdExtDirExt;

use crate::error::{HostError, Result};

/// Upstream's default mode for files mco writes.
pub const DEFAULT_FILE_MODE: u32 = 0o644;
/// Upstream's default mode for directories mco creates.
pub const DEFAULT_DIR_MODE: u32 = 0o755;

/// What to do when changing a file's owner is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChownPolicy {
    /// A refused chown is an error (running as root: it must not fail).
    Strict,
    /// A refused chown is logged and ignored (an unprivileged simulated node cannot give files
    /// away, and its owners only matter to the comparison, not to security).
    BestEffort,
}

/// What a completed write must survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// A power cut: data and directory entries are fsynced before a write returns (a real
    /// host, whose reboot is the kernel's).
    PowerLoss,
    /// The writer's death: renames keep every write atomic, and the page cache keeps it. A
    /// simulated node's reboot is its daemon stopping, not its kernel, so fsyncs there only
    /// cost the machine that runs the whole cluster.
    ProcessCrash,
}

/// Mode and owner of a file to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileAttrs {
    /// Permission bits (may include setuid/setgid/sticky).
    pub mode: u32,
    /// Owner; `None` leaves it to the writer (root when the daemon runs as root).
    pub uid: Option<u32>,
    /// Group; `None` leaves it to the writer.
    pub gid: Option<u32>,
    /// Mode of parent directories that have to be created.
    pub dir_mode: u32,
}

impl Default for FileAttrs {
    fn default() -> Self {
        FileAttrs {
            mode: DEFAULT_FILE_MODE,
            uid: None,
            gid: None,
            dir_mode: DEFAULT_DIR_MODE,
        }
    }
}

impl FileAttrs {
    /// Default owner and directory mode with the given file mode.
    pub fn mode(mode: u32) -> Self {
        FileAttrs {
            mode,
            ..FileAttrs::default()
        }
    }

    /// Same attributes with an owner.
    pub fn owned(self, uid: u32, gid: u32) -> Self {
        FileAttrs {
            uid: Some(uid),
            gid: Some(gid),
            ..self
        }
    }
}

/// What is at a host path, without following a final symlink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub len: u64,
    /// Kind of entry.
    pub kind: EntryKind,
}

/// Kind of filesystem entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link (not followed).
    Symlink,
    /// Anything else (device, fifo, socket).
    Other,
}

/// The host's files, relative to a root.
#[derive(Debug)]
pub struct HostFs {
    dir: Dir,
    root: PathBuf,
    chown: ChownPolicy,
    durability: Durability,
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name for a temp file in `rel`'s directory that no other writer (process or thread) uses,
/// to be renamed over `rel`.
fn tmp_beside(rel: &Path) -> PathBuf {
    let name = rel.file_name().unwrap_or_default().to_string_lossy();
    rel.with_file_name(format!(
        ".{name}.mco-tmp-{}-{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Where [`HostFs::write_atomic`] keeps, under a simulated node's root, one swap file per
/// target it has written (see `replace_by_exchange`).
pub const SWAP_DIR: &str = ".mco-swap";

/// The swap file's name for `rel`: its path with `/` and `%` escaped, so one name stands for
/// one path; `None` past what a file name may hold.
fn swap_name(rel: &Path) -> Option<PathBuf> {
    let mut name = String::new();
    for b in rel.as_os_str().as_encoded_bytes() {
        match b {
            b'/' => name.push_str("%2F"),
            b'%' => name.push_str("%25"),
            _ => name.push(char::from(*b)),
        }
    }
    // Bytes above 0x7f came in as chars of their own: count what the file system sees.
    (name.len() <= 200 && name.is_ascii()).then(|| PathBuf::from(name))
}

/// A lock for writes to one path of one root: 64 stripes, so unrelated writes rarely wait.
fn swap_lock(root: &Path, rel: &Path) -> std::sync::MutexGuard<'static, ()> {
    use std::hash::{Hash, Hasher};
    static STRIPES: [std::sync::Mutex<()>; 64] = [const { std::sync::Mutex::new(()) }; 64];
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (root, rel).hash(&mut h);
    STRIPES[(h.finish() % 64) as usize]
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The owner a file this process creates gets: `/proc/self` belongs to the effective ids.
fn writer_ids() -> (u32, u32) {
    static IDS: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *IDS.get_or_init(|| {
        std::fs::metadata("/proc/self")
            .map(|m| (m.uid(), m.gid()))
            .unwrap_or((0, 0))
    })
}

/// True when the process runs as root. `/proc/self` is owned by the effective uid, which
/// avoids `unsafe` FFI for `geteuid`.
pub fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// Turns a host-absolute path into one relative to the root, refusing `..` so that errors
/// name the bad path instead of surfacing as an opaque capability error.
pub fn relative(path: &str) -> Result<PathBuf> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(HostError::InvalidPath {
            path: path.to_string(),
            reason: "host paths must be absolute",
        });
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(HostError::InvalidPath {
                    path: path.to_string(),
                    reason: "host paths must not contain `..`",
                });
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(HostError::InvalidPath {
            path: path.to_string(),
            reason: "the root itself cannot be written",
        });
    }
    Ok(out)
}

fn kind_of(m: &Metadata) -> EntryKind {
    let t = m.file_type();
    if t.is_symlink() {
        EntryKind::Symlink
    } else if t.is_dir() {
        EntryKind::Dir
    } else if t.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    }
}

impl HostFs {
    /// Opens the root. Owners are changed strictly when running as root, best-effort otherwise.
    pub fn open(root: impl AsRef<Path>) -> Result<HostFs> {
        let root = root.as_ref();
        let dir = Dir::open_ambient_dir(root, ambient_authority())
            .map_err(|e| HostError::io(format!("opening root {}", root.display()), e))?;
        let chown = if running_as_root() {
            ChownPolicy::Strict
        } else {
            ChownPolicy::BestEffort
        };
        Ok(HostFs {
            dir,
            root: root.to_path_buf(),
            chown,
            durability: Durability::PowerLoss,
        })
    }

    /// Overrides what a completed write survives (a power cut unless told otherwise).
    pub fn with_durability(mut self, durability: Durability) -> HostFs {
        self.durability = durability;
        self
    }

    /// What a completed write survives.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Overrides the chown policy.
    pub fn with_chown_policy(mut self, policy: ChownPolicy) -> HostFs {
        self.chown = policy;
        self
    }

    /// The root on the daemon's own filesystem (for tools that need a path, such as `chroot`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The capability directory, for callers that need cap-std directly.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Reopens the same root (a second handle for another component).
    pub fn try_clone(&self) -> Result<HostFs> {
        Ok(HostFs {
            dir: self
                .dir
                .try_clone()
                .map_err(|e| HostError::io("cloning root handle", e))?,
            root: self.root.clone(),
            chown: self.chown,
            durability: self.durability,
        })
    }

    /// Whether anything (including a dangling symlink) exists at the path.
    pub fn exists(&self, path: &str) -> Result<bool> {
        Ok(self.stat(path)?.is_some())
    }

    /// `lstat` of the path, `None` when absent.
    pub fn stat(&self, path: &str) -> Result<Option<Stat>> {
        let rel = relative(path)?;
        let m = self
            .dir
            .symlink_metadata_optional(&rel)
            .map_err(|e| HostError::io(format!("stat {path}"), e))?;
        Ok(m.map(|m| Stat {
            mode: m.permissions().mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
            len: m.len(),
            kind: kind_of(&m),
        }))
    }

    /// Reads a whole file.
    pub fn read(&self, path: &str) -> Result<Vec<u8>> {
        self.dir
            .read(relative(path)?)
            .map_err(|e| HostError::io(format!("reading {path}"), e))
    }

    /// Reads a whole file into `buf` (cleared first), reusing its allocation across calls.
    pub fn read_into(&self, path: &str, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        self.dir
            .open(relative(path)?)
            .and_then(|mut f| io::Read::read_to_end(&mut f, buf))
            .map(drop)
            .map_err(|e| HostError::io(format!("reading {path}"), e))
    }

    /// Reads a whole file, `None` when absent.
    pub fn read_optional(&self, path: &str) -> Result<Option<Vec<u8>>> {
        self.dir
            .read_optional(relative(path)?)
            .map_err(|e| HostError::io(format!("reading {path}"), e))
    }

    /// Reads a whole UTF-8 file.
    pub fn read_to_string(&self, path: &str) -> Result<String> {
        self.dir
            .read_to_string(relative(path)?)
            .map_err(|e| HostError::io(format!("reading {path}"), e))
    }

    /// Names in a directory, sorted; empty when the directory is absent.
    pub fn list_dir(&self, path: &str) -> Result<Vec<String>> {
        let rel = relative(path)?;
        let entries = match self.dir.read_dir(&rel) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(HostError::io(format!("listing {path}"), e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| HostError::io(format!("listing {path}"), e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    /// `mkdir -p`: creates missing directories with `mode` and, when given, owner. Existing
    /// directories are left as they are.
    pub fn create_dir_all(
        &self,
        path: &str,
        mode: u32,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<()> {
        let rel = relative(path)?;
        // Every atomic write ensures its parent: that it is there already, as it nearly always
        // is, takes one lookup instead of a mkdir and a stat per component.
        if self.dir.metadata(&rel).is_ok_and(|m| m.is_dir()) {
            return Ok(());
        }
        let mut cur = PathBuf::new();
        for c in rel.components() {
            cur.push(c);
            match self.dir.create_dir(&cur) {
                Ok(()) => {
                    let shown = format!("/{}", cur.display());
                    // The new entry must outlive a power cut along with what goes inside it.
                    self.sync_dir_rel(cur.parent().unwrap_or(Path::new("")), &shown)?;
                    self.dir
                        .set_permissions(&cur, Permissions::from_mode(mode))
                        .map_err(|e| HostError::io(format!("chmod {shown}"), e))?;
                    if uid.is_some() || gid.is_some() {
                        // A read-only open, not `open_dir`: an O_PATH handle cannot be fchown'd.
                        let d = self
                            .dir
                            .open(&cur)
                            .map_err(|e| HostError::io(format!("opening {shown}"), e))?;
                        self.fchown(&d, uid, gid, &shown)?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let m = self
                        .dir
                        .metadata(&cur)
                        .map_err(|e| HostError::io(format!("stat /{}", cur.display()), e))?;
                    if !m.is_dir() {
                        return Err(HostError::io(
                            format!("creating directory /{}", cur.display()),
                            io::Error::new(io::ErrorKind::AlreadyExists, "not a directory"),
                        ));
                    }
                }
                Err(e) => {
                    return Err(HostError::io(
                        format!("creating directory /{}", cur.display()),
                        e,
                    ));
                }
            }
        }
        Ok(())
    }

    /// Sets mode and owner of an existing directory (used when its attributes are part of the
    /// contract, e.g. `~core/.ssh`).
    pub fn set_dir_attrs(
        &self,
        path: &str,
        mode: u32,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<()> {
        let rel = relative(path)?;
        self.dir
            .set_permissions(&rel, Permissions::from_mode(mode))
            .map_err(|e| HostError::io(format!("chmod {path}"), e))?;
        if uid.is_some() || gid.is_some() {
            let d = self
                .dir
                .open(&rel)
                .map_err(|e| HostError::io(format!("opening {path}"), e))?;
            self.fchown(&d, uid, gid, path)?;
        }
        Ok(())
    }

    fn fchown(
        &self,
        fd: impl std::os::fd::AsFd,
        uid: Option<u32>,
        gid: Option<u32>,
        shown: &str,
    ) -> Result<()> {
        match std::os::unix::fs::fchown(fd, uid, gid) {
            Ok(()) => Ok(()),
            Err(e) if self.chown == ChownPolicy::BestEffort => {
                tracing::warn!(path = shown, ?uid, ?gid, error = %e, "cannot change owner; ignored");
                Ok(())
            }
            Err(e) => Err(HostError::io(format!("chown {shown}"), e)),
        }
    }

    /// Writes a file atomically: parents are created, a temp file in the same directory gets
    /// the mode (before any data, in case it is secret), the data and the owner, is fsynced and
    /// renamed over the target, and the directory is fsynced. A crash at any instant leaves
    /// either the old or the new content, never a mix. Under [`Durability::ProcessCrash`] the
    /// fsyncs are skipped and the rename alone keeps that promise.
    pub fn write_atomic(&self, path: &str, contents: &[u8], attrs: &FileAttrs) -> Result<()> {
        let rel = relative(path)?;
        if let Some(parent) = Path::new(path).parent()
            && parent != Path::new("/")
        {
            self.create_dir_all(&parent.to_string_lossy(), attrs.dir_mode, None, None)?;
        }
        if self.durability == Durability::ProcessCrash {
            if let Some(done) = self.replace_by_exchange(&rel, contents, attrs, path)? {
                return Ok(done);
            }
            return self.replace_unsynced(&rel, contents, attrs, path);
        }
        self.dir
            .atomic_replace_with(&rel, |w| -> io::Result<()> {
                w.get_mut()
                    .as_file_mut()
                    .set_permissions(Permissions::from_mode(attrs.mode))?;
                w.write_all(contents)?;
                w.flush()?;
                if attrs.uid.is_some() || attrs.gid.is_some() {
                    self.fchown(w.get_ref().as_file(), attrs.uid, attrs.gid, path)
                        .map_err(io::Error::other)?;
                }
                Ok(())
            })
            .map_err(|e| HostError::io(format!("writing {path}"), e))
    }

    /// [`HostFs::write_atomic`] without the fsyncs, and without a new inode: the content goes
    /// into a file kept for the target under [`SWAP_DIR`], which then trades places with the
    /// target in one `renameat2(RENAME_EXCHANGE)`. A reader or a killed writer still sees the
    /// old or the new content whole, and the old inode is the next write's swap file. Creating
    /// a fresh temp file for every write made inode allocation alone about a sixteenth of a
    /// 1,000-node simulated rollout's CPU.
    ///
    /// `Ok(None)` where this does not apply (a target path too long for a swap name, a
    /// filesystem without the exchange); the caller then writes a temp file as usual.
    fn replace_by_exchange(
        &self,
        rel: &Path,
        contents: &[u8],
        attrs: &FileAttrs,
        path: &str,
    ) -> Result<Option<()>> {
        use rustix::fs::{RenameFlags, renameat_with};
        let Some(swap) = swap_name(rel) else {
            return Ok(None);
        };
        let (parent, name) = match (rel.parent(), rel.file_name()) {
            (Some(p), Some(n)) => (p, n),
            _ => return Ok(None),
        };
        let io = |e: io::Error| HostError::io(format!("writing {path}"), e);
        // Two writers of one path in this process would share its swap file.
        let _turn = swap_lock(&self.root, rel);
        let swaps = match self.dir.open_dir(SWAP_DIR) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.dir.create_dir_all(SWAP_DIR).map_err(io)?;
                self.dir.open_dir(SWAP_DIR).map_err(io)?
            }
            Err(e) => return Err(io(e)),
        };
        let target_dir = if parent.as_os_str().is_empty() {
            self.dir.try_clone().map_err(io)?
        } else {
            self.dir.open_dir(parent).map_err(io)?
        };
        // The exchange would move a directory aside where a rename over it fails: that
        // failure stays the temp-file path's.
        if target_dir.symlink_metadata(name).is_ok_and(|m| m.is_dir()) {
            return Ok(None);
        }
        let mut opts = cap_std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        cap_std::fs::OpenOptionsExt::mode(&mut opts, attrs.mode & 0o777);
        let mut f = swaps.open_with(&swap, &opts).map_err(io)?;
        // A reused swap file is an older target, with that file's owner: a write that names
        // none gives it back to the writer, as a new file would be.
        if attrs.uid.is_none() || attrs.gid.is_none() {
            let (uid, gid) = writer_ids();
            let m = f.metadata().map_err(io)?;
            let uid = (attrs.uid.is_none() && m.uid() != uid).then_some(uid);
            let gid = (attrs.gid.is_none() && m.gid() != gid).then_some(gid);
            if uid.is_some() || gid.is_some() {
                self.fchown(&f, uid, gid, path)?;
            }
        }
        // The mode before any data, in case it is secret; special bits need an explicit chmod.
        f.set_permissions(Permissions::from_mode(attrs.mode))
            .and_then(|()| f.write_all(contents))
            .map_err(io)?;
        if attrs.uid.is_some() || attrs.gid.is_some() {
            self.fchown(&f, attrs.uid, attrs.gid, path)?;
        }
        drop(f);
        match renameat_with(&swaps, &swap, &target_dir, name, RenameFlags::EXCHANGE) {
            Ok(()) => {}
            // No target yet: the swap file becomes it.
            Err(rustix::io::Errno::NOENT) => {
                renameat_with(&swaps, &swap, &target_dir, name, RenameFlags::empty())
                    .map_err(|e| io(e.into()))?;
                return Ok(Some(()));
            }
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS | rustix::io::Errno::XDEV) => {
                let _ = swaps.remove_file(&swap);
                return Ok(None);
            }
            Err(e) => return Err(io(e.into())),
        }
        // What came back is the old target. Only a plain file of its own is written into
        // next time: through a symlink or a second hard link, that write would land elsewhere.
        let reusable = swaps
            .symlink_metadata(&swap)
            .is_ok_and(|m| m.is_file() && m.nlink() == 1);
        if !reusable {
            let _ = swaps.remove_file(&swap);
        }
        Ok(Some(()))
    }

    /// [`HostFs::write_atomic`] without the fsyncs: a temp file beside the target, renamed
    /// over it, so a reader or a killed writer still sees the old or the new content whole.
    fn replace_unsynced(
        &self,
        rel: &Path,
        contents: &[u8],
        attrs: &FileAttrs,
        path: &str,
    ) -> Result<()> {
        let tmp = tmp_beside(rel);
        let written = (|| -> Result<()> {
            let mut opts = cap_std::fs::OpenOptions::new();
            opts.write(true).create_new(true);
            // The mode is the file's from its creation, before any data, in case it is secret.
            cap_std::fs::OpenOptionsExt::mode(&mut opts, attrs.mode & 0o777);
            let mut f = self
                .dir
                .open_with(&tmp, &opts)
                .map_err(|e| HostError::io(format!("writing {path}"), e))?;
            // The umask may have cleared bits, and special bits need an explicit chmod.
            f.set_permissions(Permissions::from_mode(attrs.mode))
                .and_then(|()| f.write_all(contents))
                .map_err(|e| HostError::io(format!("writing {path}"), e))?;
            if attrs.uid.is_some() || attrs.gid.is_some() {
                self.fchown(&f, attrs.uid, attrs.gid, path)?;
            }
            self.dir
                .rename(&tmp, &self.dir, rel)
                .map_err(|e| HostError::io(format!("writing {path}"), e))
        })();
        if written.is_err() {
            let _ = self.dir.remove_file(&tmp);
        }
        written
    }

    /// Appends to a file (created 0644 with its parents when missing) in one `write` on an
    /// `O_APPEND` descriptor, so concurrent writers of whole lines do not interleave them.
    pub fn append(&self, path: &str, data: &[u8]) -> Result<()> {
        self.append_file(path, data).map(drop)
    }

    fn append_file(&self, path: &str, data: &[u8]) -> Result<cap_std::fs::File> {
        let rel = relative(path)?;
        if let Some(parent) = Path::new(path).parent()
            && parent != Path::new("/")
        {
            self.create_dir_all(&parent.to_string_lossy(), DEFAULT_DIR_MODE, None, None)?;
        }
        let mut opts = cap_std::fs::OpenOptions::new();
        opts.append(true).create(true);
        cap_std::fs::OpenOptionsExt::mode(&mut opts, DEFAULT_FILE_MODE);
        let mut f = self
            .dir
            .open_with(&rel, &opts)
            .map_err(|e| HostError::io(format!("opening {path}"), e))?;
        f.write_all(data)
            .map_err(|e| HostError::io(format!("appending to {path}"), e))?;
        Ok(f)
    }

    /// Like [`HostFs::append`], then `fdatasync` (under [`Durability::PowerLoss`]): the record is
    /// on disk when this returns, so a journal entry written before a change is never lost while
    /// the change survives.
    pub fn append_durable(&self, path: &str, data: &[u8]) -> Result<()> {
        let f = self.append_file(path, data)?;
        if self.durability == Durability::ProcessCrash {
            return Ok(());
        }
        f.sync_data()
            .map_err(|e| HostError::io(format!("syncing {path}"), e))
    }

    /// fsyncs the directory holding `path`, making a creation, rename or removal in it durable
    /// (nothing to do under [`Durability::ProcessCrash`]).
    pub fn sync_parent(&self, path: &str) -> Result<()> {
        let rel = relative(path)?;
        self.sync_dir_rel(rel.parent().unwrap_or(Path::new("")), path)
    }

    fn sync_dir_rel(&self, rel: &Path, shown: &str) -> Result<()> {
        if self.durability == Durability::ProcessCrash {
            return Ok(());
        }
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        self.dir
            .open(rel)
            .and_then(|d| d.sync_all())
            .map_err(|e| HostError::io(format!("syncing the directory of {shown}"), e))
    }

    /// Removes a file or symlink; `false` when it was already absent.
    pub fn remove_file(&self, path: &str) -> Result<bool> {
        self.dir
            .remove_file_optional(relative(path)?)
            .map_err(|e| HostError::io(format!("removing {path}"), e))
    }

    /// Removes a file or a whole tree; `false` when it was already absent.
    pub fn remove_all(&self, path: &str) -> Result<bool> {
        self.dir
            .remove_all_optional(relative(path)?)
            .map_err(|e| HostError::io(format!("removing {path}"), e))
    }

    /// Points `link` at `target` (stored verbatim, may be absolute), replacing whatever was at
    /// `link` atomically. A directory in the way is removed first, as upstream does for masks.
    pub fn symlink(&self, target: &str, link: &str) -> Result<()> {
        let rel = relative(link)?;
        if let Some(parent) = Path::new(link).parent()
            && parent != Path::new("/")
        {
            self.create_dir_all(&parent.to_string_lossy(), DEFAULT_DIR_MODE, None, None)?;
        }
        if let Some(st) = self.stat(link)?
            && st.kind == EntryKind::Dir
        {
            self.remove_all(link)?;
        }
        let tmp = tmp_beside(&rel);
        self.dir
            .symlink_contents(target, &tmp)
            .map_err(|e| HostError::io(format!("creating symlink {link} -> {target}"), e))?;
        if let Err(e) = self.dir.rename(&tmp, &self.dir, &rel) {
            let _ = self.dir.remove_file(&tmp);
            return Err(HostError::io(
                format!("creating symlink {link} -> {target}"),
                e,
            ));
        }
        Ok(())
    }

    /// The verbatim target of a symlink; `None` when the path is absent or not a symlink.
    pub fn read_link(&self, path: &str) -> Result<Option<PathBuf>> {
        match self.stat(path)? {
            Some(st) if st.kind == EntryKind::Symlink => self
                .dir
                .read_link_contents(relative(path)?)
                .map(Some)
                .map_err(|e| HostError::io(format!("reading link {path}"), e)),
            _ => Ok(None),
        }
    }

    /// Renames within the root (atomic on one filesystem).
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.dir
            .rename(relative(from)?, &self.dir, relative(to)?)
            .map_err(|e| HostError::io(format!("renaming {from} to {to}"), e))
    }

    /// Copies a file like `cp -a`: content, mode and owner for a regular file; the link itself
    /// for a symlink. The destination is written atomically.
    pub fn copy_preserving(&self, from: &str, to: &str) -> Result<()> {
        let st = self.stat(from)?.ok_or_else(|| {
            HostError::io(
                format!("copying {from} to {to}"),
                io::Error::from(io::ErrorKind::NotFound),
            )
        })?;
        match st.kind {
            EntryKind::Symlink => {
                let target = self.read_link(from)?.unwrap_or_default();
                self.symlink(&target.to_string_lossy(), to)
            }
            EntryKind::File => {
                let data = self.read(from)?;
                self.write_atomic(to, &data, &FileAttrs::mode(st.mode).owned(st.uid, st.gid))
            }
            _ => Err(HostError::io(
                format!("copying {from} to {to}"),
                io::Error::new(io::ErrorKind::InvalidInput, "not a regular file or symlink"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, HostFs) {
        let t = tempfile::tempdir().unwrap();
        let fs = HostFs::open(t.path()).unwrap();
        (t, fs)
    }

    #[test]
    fn relative_paths() {
        assert_eq!(relative("/etc/motd").unwrap(), PathBuf::from("etc/motd"));
        assert!(relative("etc/motd").is_err());
        assert!(relative("/etc/../../x").is_err());
        assert!(relative("/").is_err());
    }

    const BOTH: [Durability; 2] = [Durability::PowerLoss, Durability::ProcessCrash];

    /// A simulated node's writes trade places with a kept swap file instead of making a new
    /// inode each time. The target still ends up with exactly what each write asked for, the
    /// swap file never shows beside it, and a target reached through a second hard link or a
    /// symlink never becomes a swap file that a later write would write through.
    #[test]
    fn writes_by_exchange_reuse_one_swap_file_and_never_write_through_links() {
        use std::os::unix::fs::MetadataExt as _;
        let (t, fs) = root();
        let fs = fs.with_durability(Durability::ProcessCrash);
        let attrs = FileAttrs::mode(0o600).owned(1000, 1001);
        for (i, a) in [attrs, FileAttrs::mode(0o644), FileAttrs::mode(0o640)]
            .iter()
            .enumerate()
        {
            fs.write_atomic("/etc/conf", format!("v{i}").as_bytes(), a)
                .unwrap();
            assert_eq!(fs.read("/etc/conf").unwrap(), format!("v{i}").as_bytes());
            let st = fs.stat("/etc/conf").unwrap().unwrap();
            assert_eq!(st.mode, a.mode);
            if running_as_root() {
                let want = (a.uid.unwrap_or(0), a.gid.unwrap_or(0));
                assert_eq!((st.uid, st.gid), want, "write {i}");
            }
            assert_eq!(fs.list_dir("/etc").unwrap(), vec!["conf"]);
        }
        // The old inode came back as the swap file, and is written into next time.
        let swaps = t.path().join(SWAP_DIR);
        assert_eq!(std::fs::read_dir(&swaps).unwrap().count(), 1);
        let swap_ino = std::fs::read_dir(&swaps)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .metadata()
            .unwrap()
            .ino();
        fs.write_atomic("/etc/conf", b"v3", &FileAttrs::default())
            .unwrap();
        let target = std::fs::metadata(t.path().join("etc/conf")).unwrap();
        assert_eq!(target.ino(), swap_ino);

        // A second hard link keeps the old content through every later write.
        std::fs::write(t.path().join("etc/linked"), "shared").unwrap();
        std::fs::hard_link(t.path().join("etc/linked"), t.path().join("etc/other")).unwrap();
        for v in ["a", "b"] {
            fs.write_atomic("/etc/linked", v.as_bytes(), &FileAttrs::default())
                .unwrap();
            assert_eq!(fs.read("/etc/linked").unwrap(), v.as_bytes());
            assert_eq!(
                std::fs::read_to_string(t.path().join("etc/other")).unwrap(),
                "shared"
            );
        }
        // A directory in the way is refused, as a rename over it is, and stays whole.
        std::fs::create_dir_all(t.path().join("etc/dir.d")).unwrap();
        std::fs::write(t.path().join("etc/dir.d/kept"), "kept").unwrap();
        assert!(
            fs.write_atomic("/etc/dir.d", b"file", &FileAttrs::default())
                .is_err()
        );
        assert_eq!(
            std::fs::read_to_string(t.path().join("etc/dir.d/kept")).unwrap(),
            "kept"
        );
        // So does a symlink's target.
        std::fs::write(t.path().join("etc/real"), "real").unwrap();
        std::os::unix::fs::symlink("real", t.path().join("etc/alias")).unwrap();
        for v in ["x", "y"] {
            fs.write_atomic("/etc/alias", v.as_bytes(), &FileAttrs::default())
                .unwrap();
            assert_eq!(fs.read("/etc/alias").unwrap(), v.as_bytes());
            assert_eq!(
                std::fs::read_to_string(t.path().join("etc/real")).unwrap(),
                "real"
            );
        }
    }

    #[test]
    fn atomic_write_mode_owner_and_parents() {
        for d in BOTH {
            atomic_write_mode_owner_and_parents_with(d);
        }
    }

    fn atomic_write_mode_owner_and_parents_with(d: Durability) {
        let (t, fs) = root();
        let fs = fs.with_durability(d);
        fs.write_atomic(
            "/etc/a/b/secret",
            b"data",
            &FileAttrs {
                mode: 0o600,
                uid: Some(1000),
                gid: Some(1001),
                dir_mode: 0o750,
            },
        )
        .unwrap();
        let st = fs.stat("/etc/a/b/secret").unwrap().unwrap();
        assert_eq!(st.mode, 0o600);
        if running_as_root() {
            assert_eq!((st.uid, st.gid), (1000, 1001));
        }
        assert_eq!(fs.stat("/etc/a/b").unwrap().unwrap().mode, 0o750);
        assert_eq!(
            std::fs::read(t.path().join("etc/a/b/secret")).unwrap(),
            b"data"
        );
        // Overwrite keeps no temp files behind.
        fs.write_atomic("/etc/a/b/secret", b"new", &FileAttrs::mode(0o4755))
            .unwrap();
        assert_eq!(fs.read("/etc/a/b/secret").unwrap(), b"new");
        assert_eq!(fs.stat("/etc/a/b/secret").unwrap().unwrap().mode, 0o4755);
        assert_eq!(fs.list_dir("/etc/a/b").unwrap(), vec!["secret"], "{d:?}");
        // A clone writes with the same durability.
        assert_eq!(fs.try_clone().unwrap().durability(), d);
    }

    #[test]
    fn writes_cannot_escape_root_through_symlinks() {
        for d in BOTH {
            let (t, fs) = root();
            let fs = fs.with_durability(d);
            let outside = tempfile::tempdir().unwrap();
            std::os::unix::fs::symlink(outside.path(), t.path().join("evil")).unwrap();
            let err = fs
                .write_atomic("/evil/x", b"data", &FileAttrs::default())
                .unwrap_err();
            assert!(err.to_string().contains("/evil"), "{err}");
            assert!(!outside.path().join("x").exists(), "{d:?}");
            // A file symlinked out of the root is not written through either.
            std::os::unix::fs::symlink(outside.path().join("y"), t.path().join("link")).unwrap();
            let _ = fs.write_atomic("/link", b"data", &FileAttrs::default());
            assert!(!outside.path().join("y").exists(), "{d:?}");
        }
    }

    #[test]
    fn mkdir_p_remove_and_optional_reads() {
        let (_t, fs) = root();
        fs.create_dir_all("/var/lib/x", 0o700, None, None).unwrap();
        assert_eq!(fs.stat("/var/lib/x").unwrap().unwrap().mode, 0o700);
        assert_eq!(fs.stat("/var/lib/x").unwrap().unwrap().kind, EntryKind::Dir);
        assert!(fs.read_optional("/var/lib/x/nope").unwrap().is_none());
        assert!(!fs.remove_file("/var/lib/x/nope").unwrap());
        fs.write_atomic("/var/lib/x/f", b"1", &FileAttrs::default())
            .unwrap();
        assert!(fs.remove_all("/var/lib").unwrap());
        assert!(!fs.exists("/var/lib").unwrap());
        fs.write_atomic("/blocker", b"", &FileAttrs::default())
            .unwrap();
        assert!(fs.create_dir_all("/blocker/x", 0o755, None, None).is_err());
    }

    #[test]
    fn symlinks_replace_atomically() {
        let (_t, fs) = root();
        fs.symlink("/dev/null", "/etc/systemd/system/x.service")
            .unwrap();
        assert_eq!(
            fs.read_link("/etc/systemd/system/x.service").unwrap(),
            Some(PathBuf::from("/dev/null"))
        );
        fs.symlink("../y", "/etc/systemd/system/x.service").unwrap();
        assert_eq!(
            fs.read_link("/etc/systemd/system/x.service").unwrap(),
            Some(PathBuf::from("../y"))
        );
        fs.create_dir_all("/etc/d", 0o755, None, None).unwrap();
        fs.symlink("/dev/null", "/etc/d").unwrap();
        assert_eq!(fs.stat("/etc/d").unwrap().unwrap().kind, EntryKind::Symlink);
        assert_eq!(fs.list_dir("/etc/systemd/system").unwrap().len(), 1);
        assert_eq!(fs.read_link("/etc/nothing").unwrap(), None);
    }

    #[test]
    fn copy_preserving_keeps_mode_and_links() {
        let (_t, fs) = root();
        fs.write_atomic("/etc/motd", b"hello", &FileAttrs::mode(0o640))
            .unwrap();
        fs.copy_preserving("/etc/motd", "/backup/motd").unwrap();
        assert_eq!(fs.read("/backup/motd").unwrap(), b"hello");
        assert_eq!(fs.stat("/backup/motd").unwrap().unwrap().mode, 0o640);
        fs.symlink("/usr/share/zoneinfo/UTC", "/etc/localtime")
            .unwrap();
        fs.copy_preserving("/etc/localtime", "/backup/localtime")
            .unwrap();
        assert_eq!(
            fs.read_link("/backup/localtime").unwrap(),
            Some(PathBuf::from("/usr/share/zoneinfo/UTC"))
        );
        assert!(fs.copy_preserving("/etc/none", "/backup/none").is_err());
    }
}
