package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"os"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencesql"
)

// A write guarded in its own transaction: the guard admits the write only
// if no higher token has written "report/1", and the row it keeps is
// updated in the same transaction as the data. The program imports the
// database/sql driver of its choice (here pgx's stdlib, registered as
// "pgx"); internal/drivertest runs this against SQLite, PostgreSQL and
// MySQL.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	guard, err := fencesql.New(fencesql.Postgres)
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.Setup(ctx, db); err != nil {
		log.Fatal(err)
	}

	write := func(token int64, body string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := guard.Admit(ctx, tx, "report/1", token); err != nil {
			return err // fence.ErrStale: a newer holder has written
		}
		if _, err := tx.ExecContext(ctx, `UPDATE report SET body = $1 WHERE id = 1`, body); err != nil {
			return err
		}
		return tx.Commit()
	}
	if err := write(34, "new holder"); errors.Is(err, fence.ErrStale) {
		log.Print("refused: ", err)
	}
}
