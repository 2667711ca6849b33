module github.com/fencing/fence/fencegocron/internal/schedtest

go 1.26.0

replace github.com/fencing/fence => ../../../

replace github.com/fencing/fence/fencegocron => ../../

replace github.com/fencing/fence/fenceredis => ../../../fenceredis

require (
	github.com/fencing/fence v0.0.0
	github.com/fencing/fence/fencegocron v0.0.0
	github.com/fencing/fence/fenceredis v0.0.0
	github.com/go-co-op/gocron/v2 v2.19.1
	github.com/google/uuid v1.6.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
