package redis

// scriptCancelRunningWorkflow is scriptCancelWorkflow for a workflow that may have finished: when
// its hash (in the part KEYS[1], ARGV[2] as scriptCancelWorkflow reads them) is not cancelled and no
// member of it is left unfinished, it changes nothing and answers "completed" or "failed", the state
// that part leaves the workflow in. The check and the cancel are one step, so no member finishes in
// between.
var scriptCancelRunningWorkflow = newFunc("CancelRunningWorkflow", `
local gw = G
if ARGV[2] ~= '' then gw = B end
gw = gw .. 'wf:' .. ARGV[1]
if redis.call('EXISTS', gw) == 1 and num(redis.call('HGET', gw, 'cancelled')) == 0 then
  local open = 0
  for _, st in ipairs({'scheduled', 'available', 'pending', 'active', 'retryable'}) do
    open = open + num(redis.call('HGET', gw, 'n:' .. st))
  end
  if open == 0 then
    if num(redis.call('HGET', gw, 'n:cancelled')) + num(redis.call('HGET', gw, 'n:discarded')) > 0 then
      return 'failed'
    end
    return 'completed'
  end
end
`+scriptCancelWorkflow.body)
