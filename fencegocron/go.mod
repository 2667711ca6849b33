module github.com/fencing/fence/fencegocron

go 1.26.0

require (
	github.com/fencing/fence v0.0.0
	github.com/go-co-op/gocron/v2 v2.19.1
	github.com/google/uuid v1.6.0
)

require (
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
)

replace github.com/fencing/fence => ../
