package confine

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// joinCgroups moves the trampoline — the whole process: cgroup.procs, and
// "0" is the writer — into each directory's cgroup.
func joinCgroups(dirs []string) error {
	for _, dir := range dirs {
		fd, err := unix.Open(filepath.Join(dir, "cgroup.procs"), unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		_, err = unix.Write(fd, []byte("0"))
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
	}
	return nil
}

// mountOverlay gives this thread a mount namespace of its own in which dir
// is an overlay: lower dir itself, upper and work on the tmpfs mount mnt
// (a detached mount of the caller's). Nothing of it propagates to the
// caller's namespace.
func mountOverlay(dir string, mnt int) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	// Opened in the new namespace, so the overlay may take it as its lower
	// layer: the tmpfs is then attached on top of dir, and the lower layer
	// is reached through this descriptor of the directory it covers.
	lower, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(lower)
	if err := unix.MoveMount(mnt, "", lower, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach the tmpfs: %w", err)
	}
	// redirect_dir, metacopy and index off: the upper layer then holds
	// only whole files, whole directories, whiteouts and opaque marks,
	// which is all the caller's merge must understand.
	opts := "lowerdir=/proc/self/fd/" + strconv.Itoa(lower) + ",upperdir=" + dir + "/upper,workdir=" + dir + "/work" +
		",redirect_dir=off,metacopy=off,index=off,xino=off"
	if err := unix.Mount("overlay", dir, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount the overlay on %s: %w", dir, err)
	}
	// The working directory the trampoline was started in is the lower
	// one; the target starts in the overlay.
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("chdir %s: %w", dir, err)
	}
	return nil
}

// overlayFD finds the inherited descriptor of the overlay's tmpfs by
// identity and marks it close-on-exec.
func overlayFD(w wire) (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1, err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		if st.Dev == w.OverlayDev && st.Ino == w.OverlayIno {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
				return -1, err
			}
			return fd, nil
		}
	}
	return -1, fmt.Errorf("the overlay's mount (dev %d, inode %d) was not inherited", w.OverlayDev, w.OverlayIno)
}

func dirID(f *os.File) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, 0, fmt.Errorf("%s is not a directory", f.Name())
	}
	return st.Dev, st.Ino, nil
}

// Names in a NewOverlayUpper tmpfs.
const (
	OverlayUpperDir = "upper"
	overlayWorkDir  = "work"
)

// NewOverlayUpper makes the tmpfs of a Policy.Overlay, detached (it is
// reachable only through the returned descriptor and, once a child
// attached it, that child's mount namespace, so it vanishes with its last
// holder): at most size bytes of data and inodes entries, not suid, no
// devices. Its directory OverlayUpperDir gets uid, gid and mode — the
// overlay's root directory takes them. Needs CAP_SYS_ADMIN.
func NewOverlayUpper(size int64, inodes int, uid, gid int, mode uint32) (*os.File, error) {
	if size < 1 || inodes < 1 {
		return nil, fmt.Errorf("confine: overlay tmpfs of %d bytes and %d inodes: both must be positive", size, inodes)
	}
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("confine: overlay tmpfs: fsopen: %w", err)
	}
	defer unix.Close(fs)
	for _, kv := range [][2]string{
		{"size", strconv.FormatInt(size, 10)},
		{"nr_inodes", strconv.Itoa(inodes)},
		{"mode", "0700"},
	} {
		if err := unix.FsconfigSetString(fs, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("confine: overlay tmpfs: %s=%s: %w", kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, fmt.Errorf("confine: overlay tmpfs: create: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("confine: overlay tmpfs: fsmount: %w", err)
	}
	f := os.NewFile(uintptr(mnt), "overlay-tmpfs")
	fail := func(what string, err error) (*os.File, error) {
		f.Close()
		return nil, fmt.Errorf("confine: overlay tmpfs: %s: %w", what, err)
	}
	if err := unix.Mkdirat(mnt, overlayWorkDir, 0o700); err != nil {
		return fail("mkdir "+overlayWorkDir, err)
	}
	if err := unix.Mkdirat(mnt, OverlayUpperDir, 0o700); err != nil {
		return fail("mkdir "+OverlayUpperDir, err)
	}
	if err := unix.Fchownat(mnt, OverlayUpperDir, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fail("chown "+OverlayUpperDir, err)
	}
	if err := unix.Fchmodat(mnt, OverlayUpperDir, mode&0o7777, 0); err != nil {
		return fail("chmod "+OverlayUpperDir, err)
	}
	return f, nil
}
