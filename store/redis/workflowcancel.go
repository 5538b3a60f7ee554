package redis

// scriptCancelRunningWorkflow is scriptCancelWorkflow for a workflow that may have finished: when
// its hash (in the part KEYS[1], ARGV[2] as scriptCancelWorkflow reads them) is not cancelled and no
// member or callback of it is left unfinished, it changes nothing and answers "completed" or
// "failed", the state that part leaves the workflow in. The check and the cancel are one step, so no
// job finishes in between. A workflow written before callbacks were counted (no cbc) is judged by
// its members alone, as it was then.
var scriptCancelRunningWorkflow = newFunc("CancelRunningWorkflow", `
local gw = G
if ARGV[2] ~= '' then gw = B end
gw = gw .. 'wf:' .. ARGV[1]
if redis.call('EXISTS', gw) == 1 and num(redis.call('HGET', gw, 'cancelled')) == 0 then
  local cbc = redis.call('HGET', gw, 'cbc') == '1'
  local open, cbopen = 0, 0
  for _, st in ipairs({'scheduled', 'available', 'pending', 'active', 'retryable'}) do
    open = open + num(redis.call('HGET', gw, 'n:' .. st))
    if cbc then cbopen = cbopen + num(redis.call('HGET', gw, 'c:' .. st)) end
  end
  if open + math.max(cbopen, 0) == 0 then
    local failed = num(redis.call('HGET', gw, 'n:cancelled')) + num(redis.call('HGET', gw, 'n:discarded'))
    if cbc then failed = failed + num(redis.call('HGET', gw, 'c:discarded')) end
    if failed > 0 then
      return 'failed'
    end
    return 'completed'
  end
end
`+scriptCancelWorkflow.body)
