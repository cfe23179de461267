package main

import (
	"os/user"
	"strings"

	"github.com/taskpilots/handoff/models"
)

// operator is the principal of the CLI's user and token changes: the
// operating-system account that ran the command, as cli:<name> in the admin
// log (models.CLIOperator). The account comes from os/user, else $USER (a
// container whose uid has no passwd entry), else "unknown": the change is
// recorded even when nobody can be named.
func operator(env *cliEnv) models.User {
	lookup := env.osUser
	if lookup == nil {
		lookup = func() (string, error) {
			u, err := user.Current()
			if err != nil {
				return "", err
			}
			return u.Username, nil
		}
	}
	name, err := lookup()
	if name = strings.TrimSpace(name); (err != nil || name == "") && env.getenv != nil {
		name = strings.TrimSpace(env.getenv("USER"))
	}
	if name == "" {
		name = "unknown"
	}
	return models.CLIOperator(name)
}
