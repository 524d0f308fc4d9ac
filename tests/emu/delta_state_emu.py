# Run: python3 tests/emu/delta_state_emu.py  (needs numpy; Debian: apt-get install python3-numpy). No GPU needed.
# Block-level numpy emulation of delta_state.cu's tiled state passes: the shared-memory offsets,
# padded strides, thread tiles, double-buffered dout columns and the state tiles' stores transcribed
# from the CUDA code, against the recurrence of backend_ops.def (gdn_state_fwd / gdn_state_bwd) in
# float64, at chunk, key-dim and value-dim shapes that leave tiles and columns partial.
import numpy as np, sys
rng=np.random.default_rng(0)
kCols=16;kRows=64
def fwd_ref(u,w,kn,gam,NC,C,Dk,Dv):
    S=np.zeros((Dk,Dv));states=np.zeros((NC,Dk,Dv));delta=np.zeros((NC*C,Dv))
    for c in range(NC):
        r=slice(c*C,(c+1)*C);states[c]=S
        d=u[r]-w[r]@S;delta[r]=d
        gl=gam[c*C+C-1];ek=np.exp(gl-gam[r])
        S=np.exp(gl)*S+(ek[:,None]*kn[r]).T@d
    return states,delta
def fwd_emu(u,w,kn,gam,NC,C,Dk,Dv):
    ld=Dk+4
    sh=np.zeros(Dk*kCols+kRows*kCols+kRows+2*kRows*ld)
    oS=0;odl=Dk*kCols;oek=odl+kRows*kCols;ows=oek+kRows;oks=ows+kRows*ld
    states=np.full((NC*Dk*Dv,),np.nan);delta=np.full((NC*C*Dv,),np.nan)
    ug=u.ravel();wg=w.ravel();kg=kn.ravel()
    out_states={}
    for j0 in range(0,Dv,kCols):
        nc=min(kCols,Dv-j0)
        sh[:]=0
        s={tid:np.zeros((4,2)) for tid in range(256)}
        def tiles(tid): return tid>>2,(tid&3)*4,(tid>>3)*4,(tid&7)*2
        def store(c):
            for tid in range(256):
                ta,ja,ib,jb=tiles(tid)
                if ib>=Dk: continue
                for r in range(4):
                    for q in range(2):
                        if jb+q<nc: states[(c*Dk+ib+r)*Dv+j0+jb+q]=s[tid][r][q]
        def stage(off,src_row0):
            for r in range(C): sh[off+r*ld:off+r*ld+Dk]=wk[src_row0*Dk+r*Dk: src_row0*Dk+r*Dk+Dk]
        store(0)
        for rr in range(C): sh[ows+rr*ld:ows+rr*ld+Dk]=wg[rr*Dk:rr*Dk+Dk]
        for c in range(NC):
            r0=c*C
            for rr in range(C): sh[oks+rr*ld:oks+rr*ld+Dk]=kg[(r0+rr)*Dk:(r0+rr)*Dk+Dk]
            gl=gam[r0+C-1]
            for t in range(C): sh[oek+t]=np.exp(gl-gam[r0+t])
            for tid in range(256):
                ta,ja,ib,jb=tiles(tid)
                if ta<C:
                    wr=sh[ows+ta*ld:ows+ta*ld+Dk]
                    Sm=sh[oS:oS+Dk*kCols].reshape(Dk,kCols)[:,ja:ja+4]
                    acc=wr@Sm
                    for q in range(4):
                        jj=ja+q
                        if jj<nc:
                            at=(r0+ta)*Dv+j0+jj;d=ug[at]-acc[q]
                            sh[odl+ta*kCols+jj]=d;delta[at]=d
            if c+1<NC:
                for rr in range(C): sh[ows+rr*ld:ows+rr*ld+Dk]=wg[(r0+C+rr)*Dk:(r0+C+rr)*Dk+Dk]
            el=np.exp(gl)
            newS={}
            for tid in range(256):
                ta,ja,ib,jb=tiles(tid)
                if ib<Dk:
                    acc=np.zeros((4,2))
                    for t in range(C):
                        e=sh[oek+t];kv=sh[oks+t*ld+ib:oks+t*ld+ib+4];dv=sh[odl+t*kCols+jb:odl+t*kCols+jb+2]
                        acc+=np.outer(e*kv,dv)
                    s[tid]=el*s[tid]+acc
                    for r in range(4): sh[oS+(ib+r)*kCols+jb:oS+(ib+r)*kCols+jb+2]=s[tid][r]
            if c+1<NC: store(c+1)
    return states.reshape(NC,Dk,Dv),delta.reshape(NC*C,Dv)

def bwd_ref(dout,p,w,qn,kn,gam,NC,C,Dk,Dv):
    dS=np.zeros((Dk,Dv));dsend=np.zeros((NC,Dk,Dv));dd=np.zeros((NC*C,Dv))
    for c in reversed(range(NC)):
        r=slice(c*C,(c+1)*C);dsend[c]=dS
        gl=gam[c*C+C-1];ek=np.exp(gl-gam[r]);eq=np.exp(gam[r])
        d=p[c].T@dout[r]+ek[:,None]*(kn[r]@dS);dd[r]=d
        dS=np.exp(gl)*dS+(eq[:,None]*qn[r]).T@dout[r]-w[r].T@d
    return dsend,dd
def bwd_emu(dout,p,w,qn,kn,gam,NC,C,Dk,Dv):
    ld=Dk+4
    odS=0;odd=Dk*kCols;oeq=odd+kRows*kCols;ops=oeq+kRows;odos=ops+kRows*kRows;oqs=odos+2*kRows*kCols;oks=oqs+kRows*ld;ows=oks+kRows*ld
    sh=np.zeros(ows+kRows*ld)
    dsend=np.full((NC*Dk*Dv,),np.nan);ddelta=np.full((NC*C*Dv,),np.nan)
    dg=dout.ravel();pg=p.ravel();wg=w.ravel();qg=qn.ravel();kg=kn.ravel()
    def tiles(tid): return tid>>2,(tid&3)*4,(tid>>3)*4,(tid&7)*2
    for j0 in range(0,Dv,kCols):
        nc=min(kCols,Dv-j0);sh[:]=0
        s={tid:np.zeros((4,2)) for tid in range(256)}
        def rows(off,src,r0):
            for rr in range(C): sh[off+rr*ld:off+rr*ld+Dk]=src[(r0+rr)*Dk:(r0+rr)*Dk+Dk]
        def phase1(c,dbuf):
            r0=c*C;pp=c*C*C
            sh[ops:ops+C*C]=pg[pp:pp+C*C]
            rows(oks,kg,r0)
            for e in range(C*kCols):
                t,jj=divmod(e,kCols)
                if jj<nc: sh[dbuf+e]=dg[(r0+t)*Dv+j0+jj]
        phase1(NC-1,odos+((NC-1)&1)*kRows*kCols)
        for c in reversed(range(NC)):
            r0=c*C;dc=odos+(c&1)*kRows*kCols
            rows(oqs,qg,r0);rows(ows,wg,r0)
            for tid in range(256):
                ta,ja,ib,jb=tiles(tid)
                if ib<Dk:
                    for r in range(4):
                        for q in range(2):
                            if jb+q<nc: dsend[(c*Dk+ib+r)*Dv+j0+jb+q]=s[tid][r][q]
            gl=gam[r0+C-1]
            for t in range(C): sh[oeq+t]=np.exp(gam[r0+t])
            for tid in range(256):
                ta,ja,ib,jb=tiles(tid)
                if ta<C:
                    t=ta
                    a1=np.zeros(4);a2=np.zeros(4)
                    for x in range(C):
                        a1+=sh[ops+x*C+t]*sh[dc+x*kCols+ja:dc+x*kCols+ja+4]
                    kr=sh[oks+t*ld:oks+t*ld+Dk]
                    a2=kr@sh[odS:odS+Dk*kCols].reshape(Dk,kCols)[:,ja:ja+4]
                    ek=np.exp(gl-gam[r0+t])
                    for q in range(4):
                        jj=ja+q;d=a1[q]+ek*a2[q];sh[odd+t*kCols+jj]=d
                        if jj<nc: ddelta[(r0+t)*Dv+j0+jj]=d
            if c>0: phase1(c-1,odos+((c-1)&1)*kRows*kCols)
            el=np.exp(gl)
            for tid in range(256):
                ta,ja,ib,jb=tiles(tid)
                if ib<Dk:
                    a1=np.zeros((4,2));a2=np.zeros((4,2))
                    for t in range(C):
                        e=sh[oeq+t];qv=sh[oqs+t*ld+ib:oqs+t*ld+ib+4];wv=sh[ows+t*ld+ib:ows+t*ld+ib+4]
                        dv=sh[dc+t*kCols+jb:dc+t*kCols+jb+2];xv=sh[odd+t*kCols+jb:odd+t*kCols+jb+2]
                        a1+=np.outer(e*qv,dv);a2+=np.outer(wv,xv)
                    s[tid]=el*s[tid]+a1-a2
                    for r in range(4): sh[odS+(ib+r)*kCols+jb:odS+(ib+r)*kCols+jb+2]=s[tid][r]
    return dsend.reshape(NC,Dk,Dv),ddelta.reshape(NC*C,Dv)

bad = 0
for (NC,C,Dk,Dv) in [(3,64,128,20),(2,16,8,16),(3,8,16,6)]:
    T=NC*C
    u=rng.standard_normal((T,Dv));w=rng.standard_normal((T,Dk))*0.1;kn=rng.standard_normal((T,Dk))*0.1
    gam=np.concatenate([np.cumsum(-rng.random(C)*0.1) for _ in range(NC)])
    a=fwd_ref(u,w,kn,gam,NC,C,Dk,Dv);b=fwd_emu(u,w,kn,gam,NC,C,Dk,Dv)
    print('fwd',NC,C,Dk,Dv,[np.nanmax(abs(x-y)) for x,y in zip(a,b)],[np.isnan(y).sum() for y in b])
    bad += max(np.nanmax(abs(x - y)) for x, y in zip(a, b)) > 1e-12 or any(np.isnan(y).sum() for y in b)
    dout=rng.standard_normal((T,Dv));p=rng.standard_normal((NC,C,C))*0.1;qn=rng.standard_normal((T,Dk))*0.1
    a=bwd_ref(dout,p,w,qn,kn,gam,NC,C,Dk,Dv);b=bwd_emu(dout,p,w,qn,kn,gam,NC,C,Dk,Dv)
    print('bwd',[np.nanmax(abs(x-y)) for x,y in zip(a,b)],[np.isnan(y).sum() for y in b])
    bad += max(np.nanmax(abs(x - y)) for x, y in zip(a, b)) > 1e-12 or any(np.isnan(y).sum() for y in b)
sys.exit(1 if bad else 0)
