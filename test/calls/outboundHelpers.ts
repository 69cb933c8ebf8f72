import { type Gateway, dialInAgent, until } from "../livecall/callHarness.js"
import { uniqueId } from "../support/testApp.js"
import { FALLBACK_NUMBER } from "../fallback/liveCalls.js"

export { FALLBACK_NUMBER, fallbackGatewayEnv } from "../fallback/liveCalls.js"

export interface TestEnvironment {
  readonly agentId: string
  readonly environmentId: string
  /** The event webhook's secret, when a webhookUrl was given. */
  readonly webhookSecret?: string | undefined
}

/**
 * An environment with a phone fallback, so a fallback that ran would show as a transfer to
 * FALLBACK_NUMBER; with `webhookUrl`, session.ended is delivered there, signed.
 */
export const createEnvironment = async (gateway: Gateway, webhookUrl?: string): Promise<TestEnvironment> => {
  const agentId = uniqueId("agent")
  const view = (await gateway.createEnvironment(agentId, {
    errorFallbackType: "phone",
    errorFallbackValue: FALLBACK_NUMBER,
    ...(webhookUrl !== undefined ? { webhookUrl } : {})
  })) as { id: string; webhookSecret?: string }
  return { agentId, environmentId: view.id, webhookSecret: view.webhookSecret }
}

/** One idle dial-in agent of the environment. */
export const dialInAgentFor = async (gateway: Gateway, env: TestEnvironment) => {
  const agent = await dialInAgent(gateway, env.agentId, env.environmentId)
  await until(() => gateway.idleAgents(env.agentId, env.environmentId) === 1, "the agent to be idle")
  return agent
}
