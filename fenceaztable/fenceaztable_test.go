package fenceaztable_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/fencing/fence/fenceaztable"
	"github.com/fencing/fence/internal/testkit/recordtest"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// harness describes fenceaztable to recordtest, the suite it shares with
// the other record-version stores.
func harness() recordtest.Harness[*fenceaztable.Store] {
	return recordtest.Harness[*fenceaztable.Store]{
		TTL:    2 * time.Second,
		Record: "entity", Version: "ETag",
		Server: func(t *testing.T) (string, recordtest.Process) {
			az := testserver.AzuriteTable(t)
			return testserver.Name("fence") + "|" + az.ConnectionString(), az
		},
		Open: open,
		Delete: func(ctx context.Context, s *fenceaztable.Store, key string) error {
			_, err := s.Table().DeleteEntity(ctx, fenceaztable.PartitionKey(key), "lock", nil)
			return err
		},
		Strip: func(ctx context.Context, s *fenceaztable.Store, key string) error {
			stripped := `{"PartitionKey":"` + fenceaztable.PartitionKey(key) + `","RowKey":"lock","Key":"k","Other":"x"}`
			_, err := s.Table().UpsertEntity(ctx, []byte(stripped), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
			return err
		},
		SetTestHook:      fenceaztable.SetTestHook,
		SetSettleTimeout: fenceaztable.SetSettleTimeout,
		SetDelayMutant:   fenceaztable.SetDelayMutant,
		MetadataTooLarge: 40000,
		NoTable: func(ctx context.Context, s *fenceaztable.Store) error {
			_, err := s.Table().NewListEntitiesPager(nil).NextPage(ctx)
			if err == nil || !strings.Contains(err.Error(), string(aztables.TableNotFound)) {
				return fmt.Errorf("listing the table: %v; want TableNotFound", err)
			}
			return nil
		},
		Persisted: 6 * time.Second, // Azurite's autosave interval is 5 s
	}
}

// TestRecord runs the record-version stores' shared tests against
// Azurite's Table service.
func TestRecord(t *testing.T) { recordtest.Run(t, harness()) }

// TestConformance runs fence's conformance suite against Azurite's Table
// service.
func TestConformance(t *testing.T) { recordtest.Conformance(t, harness()) }
