-- Argo CD health of a trainguard TrainingJobMonitor or AlertPolicy, read from the operator's own
-- status conditions (Ready, Degraded). Argo CD runs it with the object as `obj` (gopher-lua, Lua 5.1):
-- keep to Lua 5.1. tests/packaging/test_argocd.py runs it under Lua 5.1 and 5.4.
local hs = {}
local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the trainguard operator to reconcile it"
  return hs
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the trainguard operator to reconcile generation " .. tostring(generation)
  return hs
end
local ready = nil
local degraded = nil
for _, condition in ipairs(status.conditions) do
  if condition.type == "Ready" then
    ready = condition
  elseif condition.type == "Degraded" then
    degraded = condition
  end
end
local function describe(condition)
  local text = condition.reason or "NotReady"
  if condition.message ~= nil and condition.message ~= "" then
    text = text .. ": " .. condition.message
  end
  return text
end
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(degraded)
  return hs
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
  return hs
end
if ready ~= nil and ready.status == "False" then
  hs.status = "Degraded"
  hs.message = describe(ready)
  return hs
end
hs.status = "Progressing"
hs.message = "Waiting for the trainguard operator to reconcile it"
return hs
