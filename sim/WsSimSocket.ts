import { type ClientOptions, type RawData, WebSocket } from "ws"

/** The simulator's carrier-side socket: the one place the simulator touches `ws`. */
export type SimSocket = WebSocket
export type SimSocketOptions = ClientOptions
export type SimSocketData = RawData

export const SOCKET_OPEN = WebSocket.OPEN
export const SOCKET_CONNECTING = WebSocket.CONNECTING

export const openSimSocket = (url: string, options: SimSocketOptions): SimSocket => new WebSocket(url, options)
