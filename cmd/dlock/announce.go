package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/dlock/dlock/internal/procfs"
)

// The announcement file is how "dlock dev" tells the other commands of its
// user where it serves, and with which credential. It lives in
// $XDG_RUNTIME_DIR/dlock/, else in /run/user/UID/dlock/ when that
// directory exists (a login session's runtime directory, which cron, sudo
// and ssh commands do not get in their environment), else in
// $TMPDIR/dlock-UID/ (TMPDIR defaults to /tmp). Readers trust the file only
// if its user wrote it: owned by them, in a directory and file that no one
// else can write.

const devFileName = "dev.url"

// devFilePath returns where "dlock dev" announces itself; with create, it
// creates the directory, mode 0700. Both check that the directory belongs
// to this user and no one else can write it.
func devFilePath(create bool) (string, error) {
	uid := os.Geteuid()
	var dir string
	switch runtime := fmt.Sprintf("/run/user/%d", uid); {
	case os.Getenv("XDG_RUNTIME_DIR") != "":
		dir = filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "dlock")
	case ownedDir(runtime, uid) == nil:
		dir = filepath.Join(runtime, "dlock")
	default:
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("dlock-%d", uid))
	}
	if create {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", err
		}
	}
	if err := ownedDir(dir, uid); err != nil && (create || !errors.Is(err, os.ErrNotExist)) {
		return "", err
	}
	return filepath.Join(dir, devFileName), nil
}

// ownedDir checks that dir is a directory (not a symbolic link) owned by
// uid that no other user can write.
func ownedDir(dir string, uid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory; remove it", dir)
	case !ok || int(st.Uid) != uid:
		return fmt.Errorf("%s belongs to another user; refusing to use it", dir)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by other users (mode %v); refusing to use it (chmod 700 it)", dir, fi.Mode().Perm())
	}
	return nil
}

// devAnnouncement is what the file says.
type devAnnouncement struct {
	url   string // may hold a password
	pid   int
	start uint64 // the process's start time (procfs), 0 if unknown
}

// readDevFile returns the URL announced in path, if this user's dev
// server that wrote it still runs. The error wraps os.ErrNotExist when
// there is no file; otherwise it says why the file is not trusted or is
// stale.
func readDevFile(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return "", fmt.Errorf("the announcement %s is a symbolic link; ignoring it", path)
		}
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("the announcement %s is not a regular file; ignoring it", path)
	case !ok || int(st.Uid) != os.Geteuid():
		return "", fmt.Errorf("the announcement %s belongs to another user; ignoring it", path)
	case fi.Mode().Perm()&0o022 != 0:
		return "", fmt.Errorf("the announcement %s is writable by other users (mode %v); ignoring it", path, fi.Mode().Perm())
	}
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	a, ok := parseDevFile(b[:n])
	if !ok {
		return "", fmt.Errorf("the announcement %s is not one that dlock dev writes; ignoring it", path)
	}
	if why := a.stale(); why != "" {
		return "", fmt.Errorf("ignoring the stale announcement %s: %s (a dlock dev that did not stop cleanly)", path, why)
	}
	return a.url, nil
}

// stale says why the process that wrote the announcement no longer runs,
// or "".
func (a devAnnouncement) stale() string {
	s, ok := procfs.Process(a.pid)
	switch {
	case !ok || s.Gone():
		if ok || !processAlive(a.pid) {
			return fmt.Sprintf("its process %d has exited", a.pid)
		}
	case a.start != 0 && s.StartTime != a.start:
		return fmt.Sprintf("its process %d has exited and the PID now belongs to another process", a.pid)
	}
	return ""
}

// parseDevFile reads the announcement's two lines: the URL, and
// "pid N start T".
func parseDevFile(b []byte) (devAnnouncement, bool) {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		return devAnnouncement{}, false
	}
	f := strings.Fields(lines[1])
	if len(f) != 2 && len(f) != 4 || f[0] != "pid" {
		return devAnnouncement{}, false
	}
	a := devAnnouncement{url: lines[0]}
	var err error
	if a.pid, err = strconv.Atoi(f[1]); err != nil || a.pid <= 0 {
		return devAnnouncement{}, false
	}
	if len(f) == 4 {
		if a.start, err = strconv.ParseUint(f[3], 10, 64); err != nil || f[2] != "start" {
			return devAnnouncement{}, false
		}
	}
	return a, true
}

// writeDevFile announces url, atomically (readers never see half a file),
// readable by this user only.
func writeDevFile(path, url string) error {
	var start uint64
	if s, ok := procfs.Process(os.Getpid()); ok {
		start = s.StartTime
	}
	tmp := fmt.Sprintf("%s.%d", path, os.Getpid())
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s\npid %d start %d\n", url, os.Getpid(), start)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// removeDevFile removes the announcement if it is still this process's.
func removeDevFile(path string) {
	if b, err := os.ReadFile(path); err == nil {
		if a, ok := parseDevFile(b); ok && a.pid == os.Getpid() {
			os.Remove(path)
		}
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
