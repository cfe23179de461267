package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/taskpilots/handoff/models"
)

func init() {
	commands["user"] = command{
		summary: "create console users, reset their passwords (user create|reset-password)",
		run:     runUser,
	}
}

const userUsage = `usage: taskpilots user create --email EMAIL --name NAME --role agent|reviewer|admin [--password-stdin]
       taskpilots user reset-password --email EMAIL [--password-stdin] [--must-change=false]

Without --password-stdin a password is generated and printed once, alone on
standard output; with it, the first line of standard input is the password.
Passwords follow the password policy (12+ characters, hard to guess). A reset
signs the user out everywhere, and by default they must choose their own
password at the next sign-in.`

func runUser(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) > 0 && args[0] == "create" {
		return runUserCreate(ctx, env, args[1:])
	}
	if len(args) > 0 && args[0] == "reset-password" {
		return runUserReset(ctx, env, args[1:])
	}
	fmt.Fprintln(env.stderr, userUsage)
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		return nil
	}
	return usageErr("want the action create or reset-password")
}

// runUserReset gives a user a new password (the way back in for a locked-out
// admin); models.SetUserPassword checks the policy and revokes the user's
// logins.
func runUserReset(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet(env, "user reset-password")
	dbURL := databaseFlag(env, fs)
	email := fs.String("email", "", "the user's email address")
	fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input")
	mustChange := fs.Bool("must-change", true, "make the user choose their own password at the next sign-in")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, userUsage+"\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	password := models.RandomSecret(15)
	if *fromStdin {
		pw, err := readPasswordLine(env.stdin)
		if err != nil {
			return err
		}
		password = pw
	}
	s, err := openStore(ctx, env, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.CheckSchema(ctx); err != nil {
		return schemaError(err)
	}
	u, err := s.SetUserPassword(ctx, *email, password, *mustChange)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stderr, "reset the password of %s <%s>; every browser logged in as them was signed out\n", u.Name, u.Email)
	if !*fromStdin {
		fmt.Fprintln(env.stderr, "the generated password follows on standard output; it is shown only this once")
		fmt.Fprintln(env.stdout, password)
	}
	return nil
}

func runUserCreate(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet(env, "user create")
	dbURL := databaseFlag(env, fs)
	email := fs.String("email", "", "the user's email address, used to log in")
	name := fs.String("name", "", "the user's display name")
	role := fs.String("role", "", "agent, reviewer or admin")
	fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, userUsage+"\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}

	in := models.CreateUserInput{Email: *email, Name: *name, Role: models.Role(*role)}
	generated := !*fromStdin
	if generated {
		// 20 URL-safe characters, about 120 bits: no rule of any password
		// policy will reject it, and nobody has to invent one.
		in.Password = models.RandomSecret(15)
	} else {
		pw, err := readPasswordLine(env.stdin)
		if err != nil {
			return err
		}
		in.Password = pw
	}
	// Validate before connecting, so that every mistake is reported even
	// when the database is not reachable.
	if err := in.Validate(); err != nil {
		return err
	}

	s, err := openStore(ctx, env, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.CheckSchema(ctx); err != nil {
		return schemaError(err)
	}
	u, err := s.CreateUser(ctx, in)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stderr, "created user %s <%s> (%s), id %s\n", u.Name, u.Email, u.Role, u.ID)
	if generated {
		fmt.Fprintln(env.stderr, "its generated password follows on standard output; it is shown only this once")
		fmt.Fprintln(env.stdout, in.Password)
	}
	return nil
}

// readPasswordLine reads one line, without its line ending, so that
// `echo "$PW" | taskpilots user create … --password-stdin` does what it says.
func readPasswordLine(r io.Reader) (string, error) {
	if r == nil {
		return "", errors.New("--password-stdin: no standard input")
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("--password-stdin: read standard input: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", &models.ValidationError{Fields: []models.FieldError{{Field: "password", Message: "standard input was empty"}}}
	}
	return line, nil
}
