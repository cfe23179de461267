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
		summary: "create, disable, enable console users and reset their passwords (user create|disable|enable|reset-password)",
		run:     runUser,
	}
}

const userUsage = `usage:
  taskpilots user create --email EMAIL --name NAME --role agent|reviewer|admin [--password-stdin]
  taskpilots user disable EMAIL|ID
  taskpilots user enable EMAIL|ID
  taskpilots user reset-password EMAIL|ID

create without --password-stdin, and reset-password, generate a password and
print it once, alone on standard output; with --password-stdin the first line
of standard input is the password; passwords follow the password policy (12
or more characters, hard to guess). A disabled user cannot log in, and every
console login of theirs ends. A reset password is a one-time password: the
user's logins end, and they choose their own at the next sign-in. Every
change is recorded in the admin log, as the console's are, with the actor
cli:<your OS user>.`

func runUser(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "create":
			return runUserCreate(ctx, env, args[1:])
		case "disable", "enable", "reset-password":
			return runUserChange(ctx, env, args[0], args[1:])
		case "-h", "--help", "help":
			fmt.Fprintln(env.stderr, userUsage)
			return nil
		}
	}
	fmt.Fprintln(env.stderr, userUsage)
	return usageErr("want one of create, disable, enable or reset-password")
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

	s, err := openCurrentStore(ctx, env, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	u, _, err := s.AdminCreateUser(ctx, operator(env), in)
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

// runUserChange disables, enables or resets the password of one user,
// through the same models functions as the console's buttons.
func runUserChange(ctx context.Context, env *cliEnv, action string, args []string) error {
	fs := newFlagSet(env, "user "+action)
	dbURL := databaseFlag(env, fs)
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, userUsage+"\n\nflags:")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one user EMAIL or ID")
	}
	s, err := openCurrentStore(ctx, env, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	target, err := s.FindUser(ctx, pos[0])
	if err != nil {
		return err
	}
	op := operator(env)
	switch action {
	case "disable", "enable":
		u, err := s.SetUserDisabled(ctx, op, target.ID, action == "disable")
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stderr, "%sd user %s <%s> (%s), id %s\n", action, u.Name, u.Email, u.Role, u.ID)
	case "reset-password":
		pw, u, err := s.ResetPassword(ctx, op, target.ID)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stderr, "reset the password of %s <%s>; the new one follows on standard output, shown only this once\n", u.Name, u.Email)
		fmt.Fprintln(env.stdout, pw)
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
