-- Argo CD health for a ServingStack (infrastructure.modelplane.ai).
--
-- Install under resource.customizations.health.infrastructure.modelplane.ai_ServingStack
-- in argocd-cm (docs/status.md, "Reconciling and Stalled").
--
-- The decision, first match wins (tests/unit/test_argocd_health.py holds a
-- copy of this table):
--   no status, or status.observedGeneration behind metadata.generation -> Progressing
--   Stalled=True                                                       -> Degraded
--   Ready=True                                                         -> Healthy
--   anything else (Reconciling=True, Ready=False, no Ready yet)        -> Progressing
hs = {}
hs.status = "Progressing"
hs.message = "waiting for the operator to report"

if obj.status == nil or obj.status.conditions == nil then
  return hs
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed ~= generation then
  hs.message = "the operator has not yet seen generation " .. tostring(generation)
  return hs
end

local ready = nil
local stalled = nil
local reconciling = nil
for _, condition in ipairs(obj.status.conditions) do
  if condition.type == "Ready" then
    ready = condition
  elseif condition.type == "Stalled" then
    stalled = condition
  elseif condition.type == "Reconciling" then
    reconciling = condition
  end
end

local function said(condition)
  return (condition.reason or "") .. ": " .. (condition.message or "")
end

if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled)
elseif ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = said(ready)
elseif reconciling ~= nil and reconciling.status == "True" then
  hs.message = said(reconciling)
elseif ready ~= nil then
  hs.message = said(ready)
end
return hs
