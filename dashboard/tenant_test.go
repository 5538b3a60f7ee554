package dashboard_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
)

// The jobs list filters by tenant (#/jobs?tenant=acme, or the tenant input), and a job's tenant
// links there from the list and from the job's page.
func TestJobsTenantFilter(t *testing.T) {
	base, c := opDashboard(t, dashboard.Config{})
	bg := context.Background()
	ids := map[string]string{}
	for _, tenant := range []string{"acme", "globex", ""} {
		j, err := c.Insert(bg, noteArgs{Text: tenant}, &pronto.InsertOpts{Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		ids[tenant] = j.ID
	}
	only := func(tenant string) string {
		return `document.querySelectorAll("#jobs tbody tr").length === 1 && document.querySelector('#jobs tr[data-id="` + ids[tenant] + `"]') !== null`
	}
	u := newOpUI(t)
	u.step("the address filters", chromedp.Navigate(base+"/#/jobs?tenant=acme"), u.wait(only("acme")),
		u.wait(`document.querySelector('input[name="tenant"]').value === "acme"`))
	u.step("the input filters", u.eval(`document.querySelector('input[name="tenant"]').value = "globex"; document.querySelector("form.filters").requestSubmit(); true`),
		u.wait(`location.hash === "#/jobs?tenant=globex"`), u.wait(only("globex")))
	u.step("all tenants, each linked", chromedp.Navigate(base+"/#/jobs"), u.wait(`document.querySelectorAll("#jobs tbody tr").length === 3`),
		u.wait(`document.querySelectorAll('#jobs a.tenant').length === 2`))
	u.step("the list's tenant link", u.eval(`location.hash = document.querySelector('#jobs tr[data-id="`+ids["acme"]+`"] a.tenant').getAttribute("href"); true`),
		u.wait(only("acme")))
	u.step("the job page's tenant link", chromedp.Navigate(base+"/#/job/"+ids["globex"]), u.wait(`document.querySelector("dl.kv a.tenant") !== null`),
		u.eval(`location.hash = document.querySelector("dl.kv a.tenant").getAttribute("href"); true`), u.wait(only("globex")))
}
