module github.com/taskpilots/handoff/client

go 1.23
