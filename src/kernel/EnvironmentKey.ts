/**
 * One environment as a map key in memory: agent and environment ids joined by a NUL, which neither id
 * can contain (ids are `[A-Za-z0-9_-]`), so two different pairs never share a key.
 */
export const environmentKey = (agentId: string, environmentId: string): string => `${agentId}\u0000${environmentId}`
