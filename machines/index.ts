export { turnMachine } from './turn.ts';
export type {
  PreparedRequest,
  StepScope,
  PrepareInput,
  ModelEscalation,
  ModelRouting,
  PrepareOutput,
  CompactInput,
  CompactOutput,
  StreamInput,
  StreamOutput,
  OutputRetry,
  ExecuteToolsInput,
  ExecuteToolsOutput,
  RequestApprovalInput,
  HumanAnswer,
  TurnResume,
  TurnInput,
  TurnOutput,
  TurnEvent,
} from './turn.ts';
export { sessionMachine } from './session.ts';
export type { QueuedTurn, StartTurnOutput, FinishTurnInput, SessionEvent, SessionInput, SessionState } from './session.ts';
export { nextBatch, needsApproval, askingCall, afterBatch } from './tool-batch.ts';
export type { PlannedCall, ApprovalDecision, InputRequest, GivenInput, SuspendedCall } from './tool-batch.ts';
export { closeTranscript } from './transcript.ts';
export type { OpenToolCall } from './transcript.ts';
