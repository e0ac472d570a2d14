export function Create(ctx: any, messages: any[], options: any) {
  return { messages };
}
