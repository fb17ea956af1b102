package agent

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/musterhq/muster/ownfile"
)

// check checks the assignment, the job's user, and its directories.
// Everything after it that touches files does so as the job's user: a user
// must not use muster to write where they cannot.
func (js *jobStart) check() error {
	asg := js.asg
	if err := checkAssignment(asg); err != nil {
		return fmt.Errorf("the store's assignment does not add up: %w", err)
	}
	spec := asg.GetSpec()
	cred, err := js.a.credential(asg.GetJobId(), asg.GetRunAs())
	if err != nil {
		return err
	}
	js.cred = cred
	if dir := string(spec.GetLogDir()); dir != "" {
		// Each job's logs go to a directory of their own: two jobs never
		// write over each other's files. Another user's link or directory
		// on the way would lead them elsewhere.
		js.files.logDir = filepath.Join(dir, asg.GetJobId())
		if err := asUser(cred, func() error { return ownfile.MkdirAll(js.files.logDir, 0o755, credUID(cred)) }); err != nil {
			// The error names the directory, which may be any bytes.
			return errors.New(validText("--log-dir: " + err.Error()))
		}
	}
	js.workdir = string(spec.GetWorkdir())
	return asUser(cred, func() error { return checkWorkdir(js.workdir) })
}
