package server

// extension is one entry of the manifest's extensions list: an OJS extension document pronto
// implements (by its name, "urn:ojs:ext:<name>"), or one of pronto's own ("x-pronto-..."). Each is
// listed with its section in docs/http-api.md (TestExtensionsDocumented keeps the two together).
type extension struct {
	name string
	// needsSchemaStore: listed only when the store keeps a schema registry.
	needsSchemaStore bool
	// needsRequireTenant: listed only when the server requires every job's tenant
	// (Config.RequireTenant): ojs-multi-tenancy.md §5.1 makes the tenant mandatory once the extension
	// is enabled.
	needsRequireTenant bool
}

// extensions is what the manifest's extensions list says pronto implements, official first.
var extensions = []extension{
	{name: "bulk-operations"},
	{name: "cron"},
	{name: "dead-letter"},
	{name: "events"},
	{name: "rate-limiting"},
	{name: "unique-jobs"},
	{name: "workflows"},
	{name: "schema-registry", needsSchemaStore: true},
	{name: "backpressure"},
	{name: "progress"},
	{name: "admin-api"},
	{name: "fair-scheduling"},
	{name: "multi-tenancy", needsRequireTenant: true},
	{name: "x-pronto-relative-times"},
	{name: "x-pronto-requeue"},
	{name: "x-pronto-claim-token"},
	{name: "x-pronto-dag-workflows"},
	{name: "x-pronto-unique-jobs"},
	{name: "x-pronto-tenants"},
	{name: "x-pronto-priority-update"},
}

// extensionNames lists the extensions this server serves.
func (s *Server) extensionNames() []string {
	out := make([]string, 0, len(extensions))
	for _, x := range extensions {
		if x.needsSchemaStore && s.schemas.st == nil {
			continue
		}
		if x.needsRequireTenant && !s.requireTenant {
			continue
		}
		out = append(out, x.name)
	}
	return out
}
