package pronto_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

type SyncAccount struct {
	AccountID string `json:"account_id"`
	Reason    string `json:"reason"`
}

func (SyncAccount) Kind() string { return "account.sync" }

// A unique job is not inserted twice while the first one waits or runs: the store's unique index
// enforces it for every client and process.
func Example_unique() {
	ctx := context.Background()
	client, err := pronto.NewClient(memory.New(), &pronto.Config{})
	if err != nil {
		panic(err)
	}
	// One sync per account per ten minutes, whatever the reason.
	unique := &pronto.UniqueOpts{ArgsKeys: []string{"account_id"}, Period: 10 * time.Minute}

	first, err := client.Insert(ctx, SyncAccount{AccountID: "acct-7", Reason: "signup"}, &pronto.InsertOpts{Unique: unique})
	if err != nil {
		panic(err)
	}
	_, err = client.Insert(ctx, SyncAccount{AccountID: "acct-7", Reason: "webhook"}, &pronto.InsertOpts{Unique: unique})
	var conflict *pronto.UniqueConflictError
	if errors.As(err, &conflict) {
		fmt.Println("refused: held by the first job:", conflict.ExistingID == first.ID)
	}

	// With UniqueIgnore, the insert succeeds and hands back the job that holds the key.
	ignore := *unique
	ignore.OnConflict = pronto.UniqueIgnore
	again, err := client.Insert(ctx, SyncAccount{AccountID: "acct-7", Reason: "retry"}, &pronto.InsertOpts{Unique: &ignore})
	if err != nil {
		panic(err)
	}
	fmt.Println("duplicate:", again.Duplicate, "same job:", again.ID == first.ID)
	// Output:
	// refused: held by the first job: true
	// duplicate: true same job: true
}
