package drill

import (
	"os"
	"syscall"
)

// childProcAttr makes a server the drill started die with the drill, even
// when the drill itself is killed.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// fileOwner returns the uid owning a file.
func fileOwner(fi os.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}
